"""A tiny CSV workflow for tests of data checks, locking and the cache: a spec over
``table.csv`` (features ``a``, ``b``; target ``y``) and a way to write that table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tests.conftest import write

TABLE_SPEC = """\
name: table
data:
  name: csv
  path: table.csv
  target: y
model:
  name: mlp
  hidden: [4]
likelihood:
  name: bernoulli
prior:
  name: diag_normal
  variance: 1.0
temperatures: [1.0]
seeds: [0]
methods:
  map:
    engine: map
    optimizer: {name: adam, lr: 0.01}
    epochs: 2
evaluate:
  n_samples: 2
report:
  enabled: false
plots: []
"""


def good_rows(count: int = 40) -> list[tuple[object, ...]]:
    """``count`` rows of two standard normal features and the label ``a > 0``."""
    features = np.random.default_rng(0).normal(size=(count, 2)).round(3)
    return [(a, b, int(a > 0)) for a, b in features.tolist()]


def write_table(
    folder: Path, rows: Sequence[Sequence[object]], header: str = "a,b,y", spec: str = TABLE_SPEC
) -> Path:
    """Write ``table.csv`` (the header, then ``rows``) and the spec; return the spec's path."""
    lines = [header, *(",".join(map(str, row)) for row in rows)]
    (folder / "table.csv").write_text("\n".join(lines) + "\n")
    return write(folder, spec)
