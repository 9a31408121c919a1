"""The spec keys of the validation split: `data.validation_fraction` and a CSV file's
`data.split_column`, their defaults, and the located errors of values that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, write
from tests.spec.test_relations import problems

CSV = """\
data:
  name: csv
  path: package:pima_indians_diabetes.csv
  target: target
  split_column: part
  test_fraction: 0.3
"""


def csv_spec(tmp_path: Path) -> Path:
    text = TINY_SPEC.replace("data:\n  name: sklearn_digits\n  test_fraction: 0.5\n", CSV)
    return write(tmp_path, text.replace("likelihood:\n  name: categorical", "likelihood:\n  name: bernoulli"))


def test_no_validation_by_default(tiny_spec: Path) -> None:
    assert load_spec(tiny_spec).spec.data.validation_fraction == 0
    assert load_spec(tiny_spec, ["data.validation_fraction=0.2"]).spec.data.validation_fraction == 0.2


@pytest.mark.parametrize(("value", "words"), [
    ("1", "data.validation_fraction: expected a value less than 1, got 1"),
    ("-0.1", "data.validation_fraction: expected a value greater than or equal to 0, got -0.1"),
])
def test_a_fraction_outside_0_1_is_refused(tiny_spec: Path, value: str, words: str) -> None:
    (problem,) = problems(tiny_spec, f"data.validation_fraction={value}")
    assert words in problem


def test_continual_episodes_hold_out_no_validation(tiny_spec: Path) -> None:
    (problem,) = problems(tiny_spec, "data.episodes=3", "data.validation_fraction=0.1")
    assert "data.validation_fraction: holds out rows of data that arrive in episodes" in problem


def test_a_split_column_stands_alone_and_is_located(tmp_path: Path) -> None:
    """Beside a split column the fractions are refused, each at its own line."""
    path = csv_spec(tmp_path)
    found = problems(path, "data.validation_fraction=0.1")
    assert any(p.startswith(f"{path}:8:3: data.test_fraction: cannot be given with data.split_column") for p in found), found
    assert any("override 'data.validation_fraction=0.1': data.validation_fraction: cannot be given" in p for p in found), found
    found = problems(path, "data.split_column=target")
    assert any("data.split_column: names the target column 'target'" in p for p in found), found
