"""Data that are wrong for the fit stop before it, exit 3, naming the file, column and fix."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from bayesflow.cli import app
from bayesflow.data import Dataset, DataWarning, check_data, load_dataset
from bayesflow.data.checks import label_problems, standardize
from bayesflow.errors import DataError
from tests.data.tables import TABLE_SPEC, good_rows, write_table

ROWS = good_rows()


def invoke(*args: str) -> Any:
    """The command line in-process; stdout and stderr together in ``.output``."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder: spec.yaml and table.csv go there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused_at_run(header: str, rows: list[Any], problem: str, spec: str = TABLE_SPEC) -> None:
    """`bayesflow run` exits 3 with exactly ``problem`` about table.csv, before any fit."""
    write_table(Path.cwd(), rows, header, spec)
    result = invoke("run", "spec.yaml")
    assert result.exit_code == 3, result.output
    assert result.output.endswith(f"error: table.csv: unusable data (1 problem):\n  - {problem}\n")
    assert not Path(".bayesflow/cache").exists() or not list(Path(".bayesflow/cache").glob("*/outputs.json"))


def refused_at_validate(header: str, rows: list[Any], problem: str, spec: str = TABLE_SPEC) -> None:
    """`bayesflow validate` exits 3 with exactly ``problem``, located at the spec's key."""
    write_table(Path.cwd(), rows, header, spec)
    result = invoke("validate", "spec.yaml")
    assert result.exit_code == 3, result.output
    assert result.output == f"error: spec.yaml: invalid workflow spec (1 problem):\n  - {problem}\n"


# ------------------------------------------------------------------ labels and the likelihood


def test_labels_minus_one_and_one_under_bernoulli(folder: Path) -> None:
    """Labels −1/1 with a bernoulli likelihood used to train to accuracy 0.18; now exit 3."""
    rows = [(a, b, 2 * y - 1) for a, b, y in ROWS]
    count = sum(y == 0 for *_, y in ROWS)
    refused_at_run("a,b,y", rows, (
        "data.target: `bernoulli` needs labels 0 and 1, but the target column 'y' of table.csv "
        f"holds -1 in {count} of 40 rows; map the labels to 0 and 1 (labels -1 and 1: y → (y + 1) / 2), "
        "or use `categorical` for more than two classes"
    ))


def test_negative_class_under_categorical(folder: Path) -> None:
    """A class −1 under a categorical likelihood used to fail inside the fit (exit 1)."""
    rows = [(a, b, (-1, 0, 1)[index % 3]) for index, (a, b, _) in enumerate(ROWS)]
    refused_at_run("a,b,y", rows, (
        "data.target: `categorical` needs class labels 0..1, but the target column 'y' of table.csv "
        "holds -1 in 14 of 40 rows; relabel the classes 0, 1, ..., K-1 (a class's label is its "
        "output's index)"
    ), TABLE_SPEC.replace("name: bernoulli", "name: categorical"))


def test_classes_without_rows_are_warned_about(folder: Path) -> None:
    """Labels {0, 2, 5} (K = 6, classes 1, 3, 4 empty) load, with a warning."""
    rows = [(a, b, (0, 2, 5)[index % 3]) for index, (a, b, _) in enumerate(ROWS)]
    write_table(folder, rows, spec=TABLE_SPEC.replace("name: bernoulli", "name: categorical"))
    with pytest.warns(DataWarning) as caught:
        assert invoke("plan", "spec.yaml").exit_code == 0
    assert [str(w.message) for w in caught] == [(
        "data.target: classes 1, 3, 4 of 0..5 have no training rows in the target column 'y' of "
        "table.csv; the model still gets an output per class. If the labels are not 0..K-1 "
        "(1-based, or codes), relabel them"
    )]


@pytest.mark.parametrize(
    ("likelihood", "labels", "classes", "problem"),
    [
        ("bernoulli", [0, 1, 2], None, "holds 2 in 1 of 3 rows; map the labels to 0 and 1, or use"),
        ("categorical", [0, 1, 3], 3, "needs class labels 0..2, but y holds 3 in 1 of 3 rows"),
        ("categorical", [0.0, 0.5, 1.0], 2, "needs integer class labels 0, 1, ..., but y holds 0.5;"),
        ("gaussian", [-3.0, 0.5, 7.0], None, None),
        ("bernoulli", [0.0, 1.0, 1.0], None, None),
    ],
)
def test_label_support(likelihood: str, labels: list[float], classes: int | None, problem: str | None) -> None:
    """Each likelihood's support: bernoulli {0, 1}; categorical integers 0..K−1; gaussian all."""
    found = label_problems(np.array(labels), likelihood, classes, "y")
    assert (problem in found[0]) if problem else found == []


# ------------------------------------------------------------------------ values and sizes


@pytest.mark.parametrize(
    ("value", "kind"), [("", "NaN (empty or nan)"), ("nan", "NaN (empty or nan)"), ("inf", "infinite")]
)
def test_a_missing_or_infinite_feature(folder: Path, value: str, kind: str) -> None:
    """NaN features used to show up as a diverging step size (exit 1); now exit 3, naming
    the column and the row."""
    rows = [(value if index == 3 else a, b, y) for index, (a, b, y) in enumerate(ROWS)]
    refused_at_run("a,b,y", rows, (
        f"data.path: column 'a' of table.csv has 1 {kind} value (row 4); fill or drop those rows, "
        "a fit cannot use them"
    ))


def test_a_missing_label_is_refused_at_validate(folder: Path) -> None:
    """An empty target cell is named at validate (it made the target look real-valued)."""
    rows = [(a, b, "" if index in (2, 7) else y) for index, (a, b, y) in enumerate(ROWS)]
    refused_at_validate("a,b,y", rows, (
        "spec.yaml:5:3: data.target: column 'y' of table.csv has 2 NaN (empty or nan) values "
        "(rows 3, 8); fill or drop those rows, a fit cannot use them"
    ))


def test_a_one_row_file(folder: Path) -> None:
    """A one-row CSV used to fail inside scikit-learn's split (internal error, exit 1)."""
    refused_at_validate("a,b,y", [(0.1, 0.2, 1)], (
        "spec.yaml:4:3: data.path: table.csv has 1 data row; a train/test split needs at least two "
        "(one to train, one to test); add rows"
    ))


def test_a_header_only_file(folder: Path) -> None:
    """A header without rows used to be called 'real-valued'; now it says what it is."""
    refused_at_validate("a,b,y", [], (
        "spec.yaml:4:3: data.path: table.csv has a header row but no data rows; add rows, or point "
        "data.path at the file that holds them"
    ))


def test_an_empty_file(folder: Path) -> None:
    """A file without even a header."""
    write_table(folder, [])
    (folder / "table.csv").write_text("")
    result = invoke("validate", "spec.yaml")
    assert result.exit_code == 3
    assert result.output == (
        "error: spec.yaml: invalid workflow spec (1 problem):\n  - spec.yaml:4:3: data.path: table.csv "
        "is empty; a CSV file needs a header row naming the columns, then one row per example\n"
    )


def test_a_row_longer_than_the_header(folder: Path) -> None:
    """pandas would silently shift every value (the first columns become an index)."""
    refused_at_validate("a,b,y", [(1, 2, 3, 4, 5), *ROWS], (
        "spec.yaml:4:3: data.path: table.csv line 2 has 5 fields, the header 3 (a, b, y); "
        "give every row one value per column"
    ))


def test_a_text_target_and_a_text_feature(folder: Path) -> None:
    """Text is not read as numbers: the target at validate, a feature at run."""
    refused_at_validate("a,b,y", [(a, b, "yes" if y else "no") for a, b, y in ROWS], (
        "spec.yaml:5:3: data.target: column 'y' of table.csv holds text labels in every row "
        "(2 distinct: 'no', 'yes'); a classification needs class numbers: encode the classes as "
        "0, 1, ..., K-1 ('no' → 0, 'yes' → 1)"
    ))
    refused_at_run("a,b,y", [(a, "x" if index == 1 else b, y) for index, (a, b, y) in enumerate(ROWS)], (
        "data.path: column 'b' of table.csv is not numeric (e.g. 'x'); give numbers, or drop that column"
    ))


GAUSSIAN_SPEC = TABLE_SPEC.replace("name: bernoulli", "name: gaussian")


def test_a_regression_target_with_a_text_cell_names_that_cell(folder: Path) -> None:
    """One '?' among numbers: the message quotes that value and its row, not the good
    values, and asks for a number there (no word of classes for a regression)."""
    rows = [(a, b, "?" if index == 6 else round(a + b, 3)) for index, (a, b, _) in enumerate(ROWS)]
    refused_at_validate("a,b,y", rows, (
        "spec.yaml:5:3: data.target: column 'y' of table.csv is not numeric: 1 row holds text where "
        "a number is expected: '?' (data row 7); give a number in each of those rows, or remove them"
    ), GAUSSIAN_SPEC)


def test_a_regression_target_of_labels_says_a_regression_needs_numbers(folder: Path) -> None:
    """Text labels under a gaussian likelihood: the fix is a numeric column or a
    classification likelihood, not only "encode the classes"."""
    refused_at_validate("a,b,y", [(a, b, "yes" if y else "no") for a, b, y in ROWS], (
        "spec.yaml:5:3: data.target: column 'y' of table.csv holds text labels in every row "
        "(2 distinct: 'no', 'yes'), but the likelihood is a regression's, which needs a real number "
        "in every row; name a numeric column as data.target, or for class labels use the categorical "
        "or bernoulli likelihood with the classes encoded as 0, 1, ... ('no' → 0, 'yes' → 1, ...)"
    ), GAUSSIAN_SPEC)


@pytest.mark.parametrize(
    ("rows", "options", "problem"),
    [
        ([(0.1, 0.2, 0), (0.3, 0.1, 1), (0.5, 0.5, 1)], "", (
            "data.target: class 0 of table.csv (target column 'y') has a single row; the split keeps "
            "each class's share on both sides, so every class needs at least two rows: add rows, or "
            "drop that class"
        )),
        ([(0.1, 0.2, 0), (0.3, 0.1, 1), (0.5, 0.5, 1), (0.2, 0.2, 0)], "  test_fraction: 0.1\n", (
            "data.test_fraction: table.csv (target column 'y') has 2 classes but a test fraction of "
            "0.1 of 4 rows leaves 3 to train and 1 to test; each side needs a row of every class: add "
            "rows, or change data.test_fraction"
        )),
    ],
    ids=["single-row-class", "test-side-too-small"],
)
def test_too_few_rows_for_the_split(folder: Path, rows: list[Any], options: str, problem: str) -> None:
    """Every way scikit-learn's split refuses is said before it, with the key to change."""
    refused_at_run("a,b,y", rows, problem, TABLE_SPEC.replace("  target: y\n", "  target: y\n" + options))


def test_too_few_rows_for_a_regression_split(folder: Path) -> None:
    """Unstratified: a test fraction that leaves nothing to train on."""
    spec = TABLE_SPEC.replace("name: bernoulli", "name: gaussian").replace(
        "  target: y\n", "  target: y\n  test_fraction: 0.99\n"
    )
    refused_at_run("a,b,y", [(0.1, 0.2, 0.5), (0.3, 0.1, 1.5)], (
        "data.test_fraction: table.csv (target column 'y') has 2 data rows: a test fraction of 0.99 "
        "leaves 0 to train and 2 to test, and each needs at least one; add rows, or change "
        "data.test_fraction"
    ), spec)


# --------------------------------------------------------------------- constant columns


def test_a_constant_column_is_centred_not_scaled_with_a_warning(folder: Path) -> None:
    """A constant column used to be divided by 1e-8 (any other test value became ±1e8)."""
    rows = [(a, 5.0, y) for a, _, y in ROWS]
    write_table(folder, rows)
    with pytest.warns(DataWarning) as caught:
        dataset = load_dataset({"name": "csv", "path": "table.csv", "target": "y"}, folder)
    assert [str(w.message) for w in caught] == [(
        "data.standardize: column 'b' of table.csv is constant in the training rows and so carries "
        "no information; centred, not scaled. Drop it to silence this warning"
    )]
    assert np.all(dataset.x_train[:, 1] == 0) and np.all(dataset.x_test[:, 1] == 0)


def test_standardize_leaves_other_columns_as_before() -> None:
    """Columns that vary are scaled exactly as they always were (so digests do not change)."""
    x_train = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]], dtype=np.float32)
    x_test = np.array([[2.0, 7.0]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        train, test = standardize(x_train, x_test, ["a", "b"], "t.csv")
    spread = x_train.std(0) + 1e-8
    assert np.array_equal(train[:, 0], (x_train[:, 0] - 3.0) / spread[0])
    assert test[0, 1] == 5.0  # centred only: 7 − 2


# -------------------------------------------------------------------- check_data directly


def test_check_data_lists_every_array_with_nan() -> None:
    """The array-level safety net (datasets that name no columns) names each array."""
    x = np.array([[0.0], [np.nan]], dtype=np.float32)
    y = np.array([0, 1])
    with pytest.raises(DataError) as caught:
        check_data(Dataset(x, y, x, y, "classification", 2), "bernoulli", "mine")
    assert str(caught.value) == (
        "mine: unusable data (2 problems):\n"
        "  - data: the training inputs hold 1 NaN or infinite value; fix the data, a fit cannot use them\n"
        "  - data: the test inputs hold 1 NaN or infinite value; fix the data, a fit cannot use them"
    )
    assert caught.value.exit_code == 3


def test_the_shipped_datasets_pass() -> None:
    """sklearn_digits under categorical, and no data under energy, raise nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_data(load_dataset({"name": "sklearn_digits"}), "categorical")
        check_data(load_dataset({"name": "none"}), "energy")
