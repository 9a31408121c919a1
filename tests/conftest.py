"""Shared fixtures: a tiny valid spec, written as YAML into a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

TINY_SPEC = """\
name: tiny
description: a tiny workflow for tests
data:
  name: sklearn_digits
  test_fraction: 0.5
model:
  name: mlp
  hidden: [8]
likelihood:
  name: categorical
prior:
  name: diag_normal
  variance: 1.0
temperatures: [0.1, 1.0]
seeds: [0]
methods:
  map:
    engine: map
    optimizer: {name: adam, lr: 0.01}
    epochs: 3
  laplace:
    engine: laplace_diag_ggn
    from: map
  sghmc:
    engine: sghmc
    lr: 0.01
    epochs: 3
    chains: 2
    keep: last
evaluate:
  n_samples: 4
"""


def write(folder: Path, text: str, name: str = "spec.yaml") -> Path:
    """Write dedented YAML into ``folder/name`` and return the path."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    """A valid tiny spec file."""
    return write(tmp_path, TINY_SPEC)
