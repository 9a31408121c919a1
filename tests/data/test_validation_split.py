"""The validation split: rows held out of training (``data.validation_fraction``, a CSV
file's ``split_column``, a python loader's ``x_validation``), disjoint from the others,
of the size asked, drawn the same every time, remembered with the train/test split, and
in the data's digest only when there are some."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesflow.data import load_dataset
from bayesflow.data.dataset import Dataset, hold_out_validation
from bayesflow.data.splits import split_folder
from bayesflow.errors import DataError, SpecError

PIMA = {"name": "csv", "path": "package:pima_indians_diabetes.csv", "target": "target"}


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def rows_of(x: np.ndarray) -> set[bytes]:
    """Each row's bytes: the digits and Pima rows are distinct, so a row names itself."""
    return {row.tobytes() for row in np.ascontiguousarray(x)}


@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_digits_validation_rows_come_out_of_the_training_rows(fraction: float) -> None:
    """Disjoint train/validation/test; validation is ceil(fraction × training rows); the
    test rows are those of the split without validation; class shares are kept."""
    plain = load_dataset({"name": "sklearn_digits"})
    held = load_dataset({"name": "sklearn_digits", "validation_fraction": fraction})
    assert held.x_validation is not None and held.y_validation is not None
    assert len(held.y_validation) == int(np.ceil(fraction * len(plain.y_train)))
    assert len(held.y_train) + len(held.y_validation) == len(plain.y_train)
    # Exact: rows selected by integer indices of the same arrays.
    np.testing.assert_array_equal(held.x_test, plain.x_test)
    assert rows_of(held.x_train) | rows_of(held.x_validation) == rows_of(plain.x_train)
    assert not rows_of(held.x_train) & rows_of(held.x_validation)
    assert not rows_of(held.x_validation) & rows_of(held.x_test)
    shares = np.bincount(held.y_validation, minlength=10) / len(held.y_validation)
    overall = np.bincount(plain.y_train, minlength=10) / len(plain.y_train)
    assert np.abs(shares - overall).max() < 0.02  # stratified: each class its share


def test_the_validation_split_is_deterministic_and_remembered(cache_home: Path) -> None:
    """The same seed gives the same rows, from the cache the second time; another seed
    gives other rows; the cache holds one more split than the train/test one."""
    first = load_dataset({"name": "sklearn_digits", "validation_fraction": 0.2})
    assert len(list(split_folder().glob("*.npz"))) == 2  # train/test, then validation
    again = load_dataset({"name": "sklearn_digits", "validation_fraction": 0.2})
    assert len(list(split_folder().glob("*.npz"))) == 2
    assert first.digest == again.digest
    other = load_dataset({"name": "sklearn_digits", "validation_fraction": 0.2, "split_seed": 1})
    assert rows_of(other.x_validation) != rows_of(first.x_validation)


def test_no_validation_keeps_the_digest_of_the_four_arrays() -> None:
    """Without validation rows the digest is the one data had before the split existed
    (SHA-256 over the four arrays' shapes, dtypes and bytes), so cached stages stay valid;
    with them it changes, and with another validation split it changes again."""
    plain = load_dataset({"name": "sklearn_digits"})
    digest = hashlib.sha256()
    for array in (plain.x_train, plain.y_train, plain.x_test, plain.y_test):
        digest.update(str((array.shape, array.dtype.str)).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    assert plain.digest == digest.hexdigest()
    assert load_dataset({"name": "sklearn_digits", "validation_fraction": 0.0}).digest == plain.digest
    tenth = load_dataset({"name": "sklearn_digits", "validation_fraction": 0.1}).digest
    fifth = load_dataset({"name": "sklearn_digits", "validation_fraction": 0.2}).digest
    assert len({plain.digest, tenth, fifth}) == 3


def test_csv_validation_rows_are_standardised_by_the_training_rows() -> None:
    """Pima: 576 training rows less 20% to validation; features scaled by the remaining
    training rows' mean and sd, the validation rows by the same."""
    raw = load_dataset({**PIMA, "standardize": False, "validation_fraction": 0.2})
    scaled = load_dataset({**PIMA, "validation_fraction": 0.2})
    assert raw.y_validation is not None and raw.x_validation is not None
    assert len(raw.y_validation) == 116 and len(raw.y_train) == 460 and len(raw.y_test) == 192
    mean, spread = raw.x_train.mean(0), raw.x_train.std(0) + 1e-8
    np.testing.assert_allclose(scaled.x_validation, (raw.x_validation - mean) / spread, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scaled.x_train.mean(0), 0.0, atol=1e-5)


@pytest.mark.slow
def test_imdb_holds_validation_reviews_out_of_the_vocabulary() -> None:
    """The shipped subset: 10% of 2,000 training reviews, balanced, encoded with the
    vocabulary of the other 1,800."""
    data = load_dataset({"name": "imdb", "validation_fraction": 0.1})
    assert data.y_validation is not None and data.x_validation is not None
    assert data.x_validation.shape == (200, 100) and len(data.y_train) == 1800
    np.testing.assert_array_equal(np.bincount(data.y_validation), [100, 100])


def write_csv(tmp_path: Path, parts: list[str]) -> Path:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=len(parts)), "y": np.arange(len(parts)) % 2, "part": parts})
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_split_column_says_which_rows_go_where(tmp_path: Path) -> None:
    """Rows marked train / validation / test land there in file order; the column is
    not a feature."""
    parts = ["train", "test", "validation", "train", " validation ", "train", "test", "train"]
    path = write_csv(tmp_path, parts)
    data = load_dataset({"name": "csv", "path": str(path), "target": "y", "split_column": "part",
                         "standardize": False})
    frame = pd.read_csv(path)
    assert data.num_features == 1
    assert data.y_validation is not None and data.x_validation is not None
    for name, x, y in (("train", data.x_train, data.y_train), ("test", data.x_test, data.y_test),
                       ("validation", data.x_validation, data.y_validation)):
        chosen = frame.loc[frame["part"].str.strip() == name]
        # Exact: the file's values read as float32, no arithmetic.
        np.testing.assert_array_equal(x[:, 0], chosen["a"].to_numpy(np.float32))
        np.testing.assert_array_equal(y, chosen["y"].to_numpy())


def test_a_split_column_without_validation_rows_holds_none(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["train", "test", "train", "train"])
    data = load_dataset({"name": "csv", "path": str(path), "target": "y", "split_column": "part"})
    assert data.x_validation is None and not data.has_validation


def test_a_bad_split_value_is_a_located_data_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["train", "valid", "test", "train", "dev"])
    with pytest.raises(DataError) as raised:
        load_dataset({"name": "csv", "path": str(path), "target": "y", "split_column": "part"})
    assert str(raised.value).endswith(
        "data.split_column: column 'part' of data.csv holds 'valid', 'dev' (lines 3, 6); give "
        "every row train, validation or test"
    )


def test_a_split_column_without_training_rows_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["test", "validation", "test"])
    with pytest.raises(DataError, match="data.split_column: column 'part' of data.csv marks no row `train`"):
        load_dataset({"name": "csv", "path": str(path), "target": "y", "split_column": "part"})


def test_a_missing_split_column_is_a_spec_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ["train", "test"])
    with pytest.raises(SpecError, match=r"data.split_column: column 'parts' is not in data.csv \(columns: a, y, part\)"):
        load_dataset({"name": "csv", "path": str(path), "target": "y", "split_column": "parts"})


def test_too_large_a_validation_fraction_names_the_key() -> None:
    """A fraction that leaves no training row, or a class without a row on one side."""
    with pytest.raises(DataError) as raised:
        load_dataset({**PIMA, "validation_fraction": 0.999})
    assert (
        "data.validation_fraction: the training part of pima_indians_diabetes.csv (target column "
        "'target') has 576 data rows: a validation fraction of 0.999 leaves 0 to train and 576 to "
        "validate, and each needs at least one; add rows, or change data.validation_fraction"
    ) in str(raised.value)
    x, y = np.zeros((12, 1)), np.arange(12) % 3
    with pytest.raises(DataError, match="data.validation_fraction: the training part of toy has 3 classes "
                       "but a validation fraction of 0.1 of 12 rows leaves 10 to train and 2 to validate"):
        hold_out_validation(x, y, 0.1, 0, True, "toy")


def test_a_python_loader_may_return_validation_rows(tmp_path: Path) -> None:
    """`x_validation` and `y_validation` in the mapping become the validation rows; one
    without the other is refused, naming the missing key."""
    module = tmp_path / "mine.py"
    module.write_text(
        "import numpy as np\n"
        "def load(validation=True):\n"
        "    x = np.arange(20, dtype=float).reshape(10, 2)\n"
        "    y = np.arange(10) % 2\n"
        "    out = dict(x_train=x[:6], y_train=y[:6], x_test=x[6:8], y_test=y[6:8], x_validation=x[8:])\n"
        "    if validation:\n"
        "        out['y_validation'] = y[8:]\n"
        "    return out\n"
    )
    data = load_dataset({"name": "python", "module": str(module)}, tmp_path)
    assert isinstance(data, Dataset) and data.y_validation is not None and data.x_validation is not None
    np.testing.assert_array_equal(data.x_validation, [[16, 17], [18, 19]])
    np.testing.assert_array_equal(data.y_validation, [0, 1])
    assert data.y_validation.dtype == np.int64 and data.x_validation.dtype == np.float32
    with pytest.raises(DataError, match=r"\(missing: y_validation\)"):
        load_dataset({"name": "python", "module": str(module), "validation": False}, tmp_path)
