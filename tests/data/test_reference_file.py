"""`evaluate.reference.file`: reference class probabilities read with the data, and every
way such a file can be wrong refused at validate as a spec error at the key's line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from bayesflow.variants import load_data

# Twelve rows, three classes; half held out: six test rows.
DATA = "x1,x2,y\n" + "".join(f"{i * 0.1:.2f},{(i % 5) * 0.3:.2f},{i % 3}\n" for i in range(12))
SPEC = """\
name: reference_file
data:
  name: csv
  path: data.csv
  target: y
  test_fraction: 0.5
model: {name: mlp, hidden: [2]}
likelihood: {name: categorical}
prior: {name: diag_normal, variance: 1.0}
temperatures: [1.0]
methods:
  map: {engine: map, epochs: 2}
evaluate:
  reference:
    file: probs.csv
plots: []
report: {enabled: false}
"""
GOOD = "0.2,0.3,0.5\n" * 5 + "1,0,0\n"


def validate(folder: Path, probabilities: str, spec: str = SPEC) -> list[str]:
    """Load the spec and its data from ``folder`` with ``probabilities`` as the file; the
    problems of the spec error (``[]`` when it is valid)."""
    (folder / "data.csv").write_text(DATA)
    (folder / "probs.csv").write_text(probabilities)
    (folder / "spec.yaml").write_text(spec)
    try:
        load_data(load_spec(folder / "spec.yaml"))
    except SpecError as error:
        return error.problems
    return []


def test_a_good_file_travels_with_the_data(tmp_path: Path) -> None:
    """A header row is skipped; rows that sum to 1 within the tolerance are renormalised."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    assert validate(tmp_path, "a,b,c\n" + "0.333,0.333,0.333\n" * 5 + "1,0,0\n") == []
    dataset = load_data(load_spec(tmp_path / "spec.yaml"))
    assert dataset.reference is not None and dataset.reference.shape == (6, 3)
    np.testing.assert_allclose(dataset.reference.sum(axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(dataset.reference[0], [1 / 3] * 3, rtol=1e-15)


@pytest.mark.parametrize(
    ("probabilities", "expected"),
    [
        ("0.2,abc,0.8\n" + GOOD, "holds values that are not numbers ('abc' on line 1)"),
        ("0.2,nan,0.8\n" + GOOD[12:], "holds NaN or infinite values (line 1)"),
        ("-0.1,0.6,0.5\n" + GOOD[12:], "holds negative values (line 1)"),
        ("0.5,0.5,0.5\n" + GOOD[12:], "has rows that do not sum to 1 within 0.001 (line 1; line 1 sums to 1.5)"),
        ("0.2,0.8\n" + GOOD, "has rows of 2 values and rows of other lengths (lines 2, 3, 4, ...)"),
        (GOOD[12:], "has 5 rows, but the fits are compared on 6 test rows"),
        ("0.5,0.5\n" * 6, "has 2 columns, but the data have 3 classes"),
        ("", "holds no rows of probabilities"),
    ],
    ids=["text", "nan", "negative", "sum", "ragged", "rows", "classes", "empty"],
)
def test_a_bad_file_is_a_located_spec_error(tmp_path: Path, probabilities: str, expected: str) -> None:
    """Each problem is pointed at `evaluate.reference.file`'s line and names the lines at fault."""
    (problem,) = validate(tmp_path, probabilities)
    assert problem.startswith(f"{tmp_path / 'spec.yaml'}:15:5: evaluate.reference.file: probs.csv ")
    assert expected in problem


def test_a_missing_file_is_located(tmp_path: Path) -> None:
    """A path to nothing names the path it resolved."""
    (problem,) = validate(tmp_path, GOOD, SPEC.replace("file: probs.csv", "file: other.csv"))
    assert problem.startswith(f"{tmp_path / 'spec.yaml'}:15:5: evaluate.reference.file: file ")
    assert "other.csv" in problem and "does not exist" in problem


def test_class_probabilities_need_a_classification_likelihood(tmp_path: Path) -> None:
    """A file under a regression likelihood is refused at load, before the data are read."""
    spec = SPEC.replace("likelihood: {name: categorical}", "likelihood: {name: gaussian}")
    (problem,) = validate(tmp_path, GOOD, spec)
    assert "evaluate.reference.file: holds class probabilities, but the likelihood's task is regression" in problem


def test_method_and_file_together_are_refused(tmp_path: Path) -> None:
    """`{method, file}` is one reference too many."""
    spec = SPEC.replace("    file: probs.csv\n", "    file: probs.csv\n    method: map\n")
    (problem,) = validate(tmp_path, GOOD, spec)
    assert "evaluate.reference" in problem and "exactly one of `method`" in problem


def test_without_held_out_rows_the_file_has_a_row_per_training_point(tmp_path: Path) -> None:
    """`data.test_fraction: 0`: the fits are compared on the twelve training rows."""
    spec = SPEC.replace("test_fraction: 0.5", "test_fraction: 0")
    (problem,) = validate(tmp_path, GOOD, spec)
    assert "has 6 rows, but the fits are compared on 12 training rows (data.test_fraction is 0)" in problem
    assert validate(tmp_path, GOOD * 2, spec) == []
