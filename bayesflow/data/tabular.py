"""Datasets of feature vectors: scikit-learn's digits, a CSV file, and no data at all.

A CSV file is checked as it is read, naming the file, the column and the rows at fault:
a header without rows, a target column that is not numbers, missing or infinite values,
too few rows for the train/test split (see :mod:`bayesflow.data.checks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.data.checks import column_problems
from bayesflow.data.checks import standardize as standardize_columns
from bayesflow.data.dataset import DATASETS, Dataset, hold_out_validation, resolve_path, split
from bayesflow.data.sniff import check_text, excerpt, first_row_problem, names
from bayesflow.errors import DataError, SpecError

__all__ = ["MAX_CLASSES", "SPLIT_VALUES", "csv", "csv_target_task", "digits", "none", "sklearn_digits", "target_task"]

CSV_EXPECTED = "a UTF-8 text file of comma-separated values with a header row"
# An integer target column with at most this many distinct values is read as class labels.
MAX_CLASSES = 50


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``load_digits`` returns them (``data``, ``target``): its
    bundled CSV read the same way, without importing scikit-learn (with the split's
    indices remembered, bayesflow.data.splits, a run that computes nothing imports
    neither); ``load_digits`` itself where the file is not found."""
    import gzip
    import importlib.util

    found = importlib.util.find_spec("sklearn")  # finds the package without running it
    for root in (found.submodule_search_locations or []) if found else []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, mode="rt", encoding="utf-8") as file:
                data = np.loadtxt(file, delimiter=",")
            return data[:, :-1], data[:, -1].astype(int, copy=False)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.data, bunch.target


@DATASETS.register("sklearn_digits")
def sklearn_digits(
    test_fraction: float = 0.5,
    split_seed: int = 0,
    standardize: bool = True,
    holdout_classes: list[int] | None = None,
    episodes: int = 0,
    episode_kind: str = "permuted",
    validation_fraction: float = 0.0,
) -> Dataset:
    """scikit-learn's 8×8 handwritten digits: 1,797 images, 64 features, 10 classes.

    With ``holdout_classes`` those digits are removed from training and testing and
    become the out-of-distribution inputs (``x_ood``); the remaining classes are
    relabelled 0..C-1 in increasing order. ``validation_fraction`` of the training
    images (stratified) are held out for validation; the test images stay the same.
    """
    features, labels = digits()
    x = features.astype(np.float32)
    if standardize:
        x = x / 16.0  # pixel intensities are integers 0..16
    y = labels.astype(np.int64)
    x_ood = None
    held = sorted(set(holdout_classes or []))
    if held:
        outside = np.isin(y, held)
        x_ood, x, y = x[outside], x[~outside], y[~outside]
        kept = sorted(set(range(10)) - set(held))
        y = np.searchsorted(np.array(kept), y).astype(np.int64)
    x_train, y_train, x_test, y_test = split(x, y, test_fraction, split_seed, True, "sklearn_digits")
    x_train, y_train, x_validation, y_validation = hold_out_validation(
        x_train, y_train, validation_fraction, split_seed, True, "sklearn_digits"
    )
    episode_train = episode_test = None
    if episodes and episode_kind == "classes":
        # tasks of consecutive classes: 5 episodes are {0,1}, {2,3}, ..., {8,9}
        task = np.concatenate([
            np.full(len(group), index) for index, group in
            enumerate(np.array_split(np.arange(10 - len(held)), episodes))
        ])
        episode_train, episode_test = task[y_train], task[y_test]
    elif episodes:
        # permuted digits: episode k shows every image with the pixels in a fixed random
        # order of its own (episode 0 unpermuted), the same classes each time
        orders = [np.arange(x.shape[1])] + [
            np.random.default_rng(split_seed + k).permutation(x.shape[1]) for k in range(1, episodes)
        ]
        episode_train = np.repeat(np.arange(episodes), len(y_train))
        episode_test = np.repeat(np.arange(episodes), len(y_test))
        x_train = np.concatenate([x_train[:, order] for order in orders])
        x_test = np.concatenate([x_test[:, order] for order in orders])
        y_train, y_test = np.tile(y_train, episodes), np.tile(y_test, episodes)
    return Dataset(
        x_train, y_train, x_test, y_test, "classification", num_classes=10 - len(held), x_ood=x_ood,
        episode_train=episode_train, episode_test=episode_test,
        source="sklearn_digits", target="the digit labels of sklearn_digits",
        x_validation=x_validation, y_validation=y_validation,
    )


def target_task(values: np.ndarray) -> tuple[str, int | None]:
    """``("classification", C)`` for integer class labels 0..C-1, else ``("regression", None)``."""
    if np.issubdtype(values.dtype, np.integer) and len(np.unique(values)) <= MAX_CLASSES:
        return "classification", int(values.max()) + 1
    return "regression", None


def _read_csv(path: str, target: str, base_dir: Path | None) -> Any:
    """Read a CSV file, checking that it and its target column exist and that it has rows.

    Raises:
        SpecError: whose problem starts with the key at fault (``data.path: ...`` or
            ``data.target: ...``), so the spec loader can point at that key's line.
    """
    file = resolve_path(path, base_dir)
    if not file.is_file():
        raise SpecError(f"data.path: file {str(file)!r} does not exist; fix the path")
    frame = _parse(file)
    if target not in frame.columns:
        raise SpecError(
            f"data.target: column {excerpt(target)} is not in {file.name} "
            f"(columns: {names(frame.columns)})"
        )
    if frame.empty:
        raise DataError(
            f"data.path: {file.name} has a header row but no data rows; add rows, or point "
            "data.path at the file that holds them", str(file),
        )
    return frame


def _parse(file: Path) -> Any:
    """``pandas.read_csv(file)``, its failures turned into a DataError naming the line.

    When the first row has more fields than the header, pandas silently makes the first
    columns an index, shifting every value: that is refused too.
    """
    import pandas as pd

    check_text(file, CSV_EXPECTED)
    problem = first_row_problem(file)  # before pandas, which would index by those fields
    if problem is None:
        try:
            frame = pd.read_csv(file)
            if isinstance(frame.index, pd.RangeIndex):
                return frame
            problem = _ragged(file) or "has rows with more fields than the header"
        except pd.errors.EmptyDataError:
            problem = "is empty; a CSV file needs a header row naming the columns, then one row per example"
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as error:
            problem = _ragged(file) or (
                f"cannot be read as CSV ({excerpt(str(error).strip(), 120)}); give {CSV_EXPECTED}"
            )
    raise DataError(f"data.path: {file.name} {problem}", str(file))


def _ragged(file: Path) -> str | None:
    """``line 5 has 4 fields, the header 3 ...`` for the first row whose length differs
    from the header's, or None (then the file is unreadable for another reason)."""
    import csv as csv_module

    try:
        with file.open(newline="", encoding="utf-8") as stream:
            rows = csv_module.reader(stream)
            header = next(rows, [])
            for row in rows:
                if row and len(row) != len(header):
                    return (
                        f"line {rows.line_num} has {len(row)} fields, the header {len(header)} "
                        f"({names(header)}); give every row one value per column"
                    )
    except (OSError, UnicodeDecodeError, csv_module.Error):
        return None
    return None


def _target_values(frame: Any, target: str, file: Path, task: str | None = None) -> np.ndarray:
    """The target column, checked to be finite numbers (a spec's validation reads it too);
    ``task`` (the likelihood's: ``classification`` or ``regression``) chooses the fix a
    message about text in it suggests."""
    values = frame[target].to_numpy()
    if not np.issubdtype(values.dtype, np.number):
        raise DataError(_text_target(frame[target], target, file, task), str(file))
    problems = column_problems(frame[[target]], file.name, key="data.target")
    if problems:
        raise DataError(problems, str(file))
    if len(values) < 2:
        raise DataError(
            f"data.path: {file.name} has 1 data row; a train/test split needs at least two "
            "(one to train, one to test); add rows", str(file),
        )
    return values


def _text_target(column: Any, target: str, file: Path, task: str | None) -> str:
    """What is wrong with a target column that holds text, and the fix that fits the task:
    the rows that are not numbers (not the good ones), or, when every row is text, its
    labels and how to encode them (a classification) or that a regression needs numbers."""
    import pandas as pd

    numbers = pd.to_numeric(column, errors="coerce")
    text = column[numbers.isna() & column.notna()]
    where = f"data.target: column {target!r} of {file.name}"
    if len(text) < column.notna().sum():  # some numbers, some text: the text is the mistake
        rows = ", ".join(f"{excerpt(str(value))} (data row {index + 1})"
                         for index, value in text.iloc[:3].items())
        count = f"{len(text)} of {len(column)} rows hold" if len(text) > 1 else "1 row holds"
        return (f"{where} is not numeric: {count} text where a number is expected: {rows}; "
                f"give a number in each of those rows, or remove them")
    labels = sorted(_distinct(text))
    shown = ", ".join(labels[:5]) + (", ..." if len(labels) > 5 else "")
    found = f"{where} holds text labels in every row ({len(labels)} distinct: {shown})"
    encoding = ", ".join(f"{label} → {code}" for code, label in enumerate(labels[:3]))
    if task == "regression":
        return (f"{found}, but the likelihood is a regression's, which needs a real number in "
                "every row; name a numeric column as data.target, or for class labels use the "
                f"categorical or bernoulli likelihood with the classes encoded as 0, 1, ... "
                f"({encoding}, ...)")
    fix = f"encode the classes as 0, 1, ..., K-1 ({encoding}{', ...' if len(labels) > 3 else ''})"
    if task == "classification":
        return f"{found}; a classification needs class numbers: {fix}"
    return f"{found}; for a classification {fix}, for a regression name a numeric column"


def csv_target_task(
    path: str, target: str, base_dir: Path | None = None, likelihood_task: str | None = None,
) -> tuple[str, int | None]:
    """The task a CSV file's target column implies (see :func:`target_task`);
    ``likelihood_task``, the spec's likelihood's, fits a message about text in it.

    Raises:
        SpecError: the file or column is missing, or the column is empty, not numeric or
            holds missing values (a :class:`~bayesflow.errors.DataError`).
    """
    file = resolve_path(path, base_dir)
    frame = _read_csv(path, target, base_dir)
    return target_task(_target_values(frame, target, file, likelihood_task))


@DATASETS.register("csv")
def csv(
    path: str,
    target: str,
    test_fraction: float = 0.25,
    split_seed: int = 0,
    standardize: bool = True,
    base_dir: Path | None = None,
    validation_fraction: float = 0.0,
    split_column: str | None = None,
) -> Dataset:
    """A CSV file with a header row: numeric features and one target column.

    ``test_fraction: 0`` keeps every row for training and an empty test set (the rows
    are then not shuffled: their order does not matter to a full-batch or minibatch fit).
    ``validation_fraction`` of the training rows are held out for validation. A
    ``split_column`` (values ``train``, ``validation``, ``test``) says which rows go
    where instead of both fractions, and is not a feature.
    """
    import pandas as pd
    from pandas.api.types import is_numeric_dtype

    frame = _read_csv(path, target, base_dir)
    file = resolve_path(path, base_dir)
    y_raw = _target_values(frame, target, file)
    assigned = None if split_column is None else split_assignment(frame, split_column, file)
    features = frame.drop(columns=[target] + ([split_column] if split_column else []))
    non_numeric = [c for c in features.columns if not is_numeric_dtype(features[c])]
    if non_numeric:
        many = len(non_numeric) > 1
        column = features[non_numeric[0]]
        example = column[pd.to_numeric(column, errors="coerce").isna() & column.notna()].iloc[0]
        raise DataError(
            f"data.path: column{'s' if many else ''} {names(map(repr, non_numeric))} of {file.name} "
            f"{'are' if many else 'is'} not numeric (e.g. {excerpt(str(example))}); give numbers, or drop "
            f"{'those columns' if many else 'that column'}", str(file),
        )
    problems = column_problems(features, file.name)
    if problems:
        raise DataError(problems, str(file))
    x = features.to_numpy(dtype=np.float32)
    task, classes = target_task(y_raw)
    integer_target = task == "classification"
    y = y_raw.astype(np.int64) if integer_target else y_raw.astype(np.float32)
    where = f"{file.name} (target column {target!r})"
    x_validation: np.ndarray | None = None
    y_validation: np.ndarray | None = None
    if assigned is not None:  # the file says which rows go where
        train, test, validation = (assigned == part for part in SPLIT_VALUES)
        x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]
        if validation.any():
            x_validation, y_validation = x[validation], y[validation]
    elif test_fraction == 0:  # every row fits; nothing is held out (no predictive metrics)
        x_train, y_train, x_test, y_test = x, y, x[:0], y[:0]
    else:
        x_train, y_train, x_test, y_test = split(
            x, y, test_fraction, split_seed, integer_target, where, str(file)
        )
    if assigned is None:
        x_train, y_train, x_validation, y_validation = hold_out_validation(
            x_train, y_train, validation_fraction, split_seed, integer_target, where, str(file)
        )
    held_out = x_test if x_validation is None else np.concatenate([x_test, x_validation])
    if standardize:  # by the training rows' statistics, held-out rows too
        x_train, held_out = standardize_columns(
            x_train, held_out, list(features.columns), file.name, str(file)
        )
    held_out = held_out.astype(np.float32)
    return Dataset(
        x_train.astype(np.float32), y_train, held_out[: len(x_test)], y_test, task, classes,
        source=str(file), target=f"the target column {target!r} of {file.name}",
        x_validation=None if x_validation is None else held_out[len(x_test):],
        y_validation=y_validation,
    )


# The values of a CSV file's ``split_column``, in the order ``csv`` unpacks them.
SPLIT_VALUES = ("train", "test", "validation")


def split_assignment(frame: Any, column: str, file: Path) -> np.ndarray:
    """The ``split_column`` of a CSV file: each row's part, ``train``, ``validation`` or
    ``test`` (surrounding spaces ignored), as an array of those strings.

    Raises:
        SpecError: the column is not in the file.
        DataError: it holds another value or none, or leaves no training row.
    """
    if column not in frame.columns:
        raise SpecError(
            f"data.split_column: column {excerpt(column)} is not in {file.name} "
            f"(columns: {names(frame.columns)})"
        )
    values = frame[column].map(lambda value: value.strip() if isinstance(value, str) else value)
    bad = ~values.isin(SPLIT_VALUES)
    if bad.any():
        rows = np.flatnonzero(bad.to_numpy())
        shown = ", ".join(_distinct(values[bad])[:3])
        lines = ", ".join(str(row + 2) for row in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise DataError(
            f"data.split_column: column {column!r} of {file.name} holds {shown} (line{'s' if len(rows) > 1 else ''} "
            f"{lines}); give every row train, validation or test", str(file),
        )
    assigned = values.to_numpy(dtype=str)
    if not (assigned == "train").any():
        raise DataError(
            f"data.split_column: column {column!r} of {file.name} marks no row `train`; "
            "a fit needs training rows", str(file),
        )
    return assigned


def _distinct(values: Any) -> list[str]:
    """The distinct values of a column as shown in a message, in order of first
    appearance, a missing value as ``an empty cell``."""
    import pandas as pd

    shown = ("an empty cell" if pd.isna(value) else excerpt(str(value)) for value in values)
    return list(dict.fromkeys(shown))


@DATASETS.register("none")
def none() -> Dataset:
    """No data: one pseudo-datum with one zero feature, in training and in testing.

    With N = 1 the per-datum log posterior is the full one, log p(y|x,θ) + log p(θ), so
    an ``energy`` likelihood over a model that outputs a log density samples that density.
    """
    inputs, targets = np.zeros((1, 1), dtype=np.float32), np.zeros(1, dtype=np.float32)
    return Dataset(inputs, targets, inputs.copy(), targets.copy(), "energy", source="none")
