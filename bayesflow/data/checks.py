"""Checks of loaded data, before any fit: is every value a number, and does every label
lie in the likelihood's support?

Data that pass a spec's validation can still be wrong for the fit: labels −1/1 under a
``bernoulli`` likelihood train to a meaningless accuracy, a NaN feature shows up later as
a "diverging" step size. These checks name the file, the column and the fix, and raise
:class:`~bayesflow.errors.DataError` (exit code 3, like a spec error). Columns that are
constant in the training rows are only warned about (:class:`DataWarning`): they carry no
information, but a fit with them is still right once they are not divided by a zero
spread (:func:`standardize`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from bayesflow.data.dataset import Dataset
from bayesflow.data.sniff import excerpt
from bayesflow.errors import DataError

__all__ = ["DataWarning", "check_data", "column_problems", "label_problems", "standardize"]

# Rows listed in a message at most; the count says how many there are in all.
SHOWN = 3
# Columns with missing values listed one by one at most; the rest are counted.
MAX_COLUMN_PROBLEMS = 5


class DataWarning(UserWarning):
    """The data can be used, but probably not as meant (a constant column, an empty class)."""


# Warnings already given in this process, by (data, message): the command line loads the
# data twice (to plan, then to run), and libraries that reset the warnings registry
# (``warnings.catch_warnings``, used by scikit-learn) would let Python's own "once" repeat it.
_WARNED: set[tuple[str, str]] = set()


def _warn_once(message: str, data: str) -> None:
    """Warn ``message`` (a :class:`DataWarning`) unless it was given for ``data`` already."""
    if (data, message) not in _WARNED:
        _WARNED.add((data, message))
        warnings.warn(message, DataWarning, stacklevel=3)


def _rows(mask: np.ndarray) -> str:
    """``row 4`` or ``rows 4, 9, 12, ...`` (1-based data rows, the header not counted)."""
    rows = (np.flatnonzero(mask) + 1).tolist()
    shown = ", ".join(map(str, rows[:SHOWN])) + (", ..." if len(rows) > SHOWN else "")
    return f"row{'s' if len(rows) > 1 else ''} {shown}"


def _values(values: Sequence[Any]) -> str:
    shown = ", ".join(f"{value:g}" if isinstance(value, float) else str(value) for value in values[:SHOWN])
    return shown + (", ..." if len(values) > SHOWN else "")


def column_problems(frame: Any, where: str, key: str = "data.path") -> list[str]:
    """One problem per column of ``frame`` (a pandas DataFrame) that holds missing or
    infinite values, naming its rows; ``key`` starts each problem (the spec key at fault)."""
    problems = []
    for column in frame.columns:
        values = frame[column].to_numpy()
        if not np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.integer):
            continue
        bad = ~np.isfinite(values.astype(np.float64))
        if bad.any():
            kinds = sorted({"NaN (empty or nan)" if np.isnan(v) else "infinite" for v in values[bad]})
            problems.append(
                f"{key}: column {excerpt(str(column))} of {where} has {int(bad.sum())} {' and '.join(kinds)} "
                f"value{'s' if bad.sum() > 1 else ''} ({_rows(bad)}); fill or drop those rows, "
                "a fit cannot use them"
            )
    if len(problems) > MAX_COLUMN_PROBLEMS:  # a message of bounded length, the count kept
        more = len(problems) - MAX_COLUMN_PROBLEMS
        problems = [*problems[:MAX_COLUMN_PROBLEMS], f"{key}: and {more} more columns of {where} like these"]
    return problems


def label_problems(
    labels: np.ndarray, likelihood: str, num_classes: int | None, target: str
) -> list[str]:
    """Why ``labels`` lie outside ``likelihood``'s support ([] when they do not).

    Args:
        labels: every label, training and test.
        likelihood: the likelihood's registry name.
        num_classes: the number of classes of a categorical target (labels 0..K−1).
        target: how to name the labels in the message.
    """
    if likelihood == "bernoulli":
        outside = ~np.isin(labels, (0, 1))
        if outside.any():
            found = np.unique(labels[outside]).tolist()
            hint = " (labels -1 and 1: y → (y + 1) / 2)" if set(found) <= {-1, 1} else ""
            return [(
                f"data.target: `bernoulli` needs labels 0 and 1, but {target} holds "
                f"{_values(found)} in {int(outside.sum())} of {len(labels)} rows; map the labels "
                f"to 0 and 1{hint}, or use `categorical` for more than two classes"
            )]
    if likelihood == "categorical":
        if not np.all(np.mod(labels, 1) == 0):
            found = np.unique(labels[np.mod(labels, 1) != 0]).tolist()
            return [(
                f"data.target: `categorical` needs integer class labels 0, 1, ..., but {target} "
                f"holds {_values(found)}; encode the classes as 0, 1, ..., K-1"
            )]
        top = num_classes - 1 if num_classes else None
        outside = (labels < 0) | (labels > top if top is not None else False)
        if outside.any():
            found = np.unique(labels[outside]).tolist()
            allowed = f"0..{top}" if top is not None else "0, 1, ..."
            return [(
                f"data.target: `categorical` needs class labels {allowed}, but {target} holds "
                f"{_values(found)} in {int(outside.sum())} of {len(labels)} rows; relabel the "
                "classes 0, 1, ..., K-1 (a class's label is its output's index)"
            )]
    return []


def _finite_problems(dataset: Dataset) -> list[str]:
    """A problem per array that holds NaN or infinite values (a safety net: the csv
    loader names columns and rows before this)."""
    arrays = {
        "training inputs": dataset.x_train, "training labels": dataset.y_train,
        "test inputs": dataset.x_test, "test labels": dataset.y_test,
        "out-of-distribution inputs": dataset.x_ood,
        "validation inputs": dataset.x_validation, "validation labels": dataset.y_validation,
    }
    problems = []
    for name, array in arrays.items():
        if array is None or not np.issubdtype(array.dtype, np.floating):
            continue
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        if bad:
            problems.append(
                f"data: the {name} hold {bad} NaN or infinite value{'s' if bad > 1 else ''}; "
                "fix the data, a fit cannot use them"
            )
    return problems


def check_data(dataset: Dataset, likelihood_name: str, source: str | None = None) -> None:
    """Check loaded data against the spec's likelihood, before any fit.

    Args:
        dataset: what the loader returned.
        likelihood_name: the spec's ``likelihood.name``.
        source: names the data in the message (default: ``dataset.source``).

    Raises:
        DataError: listing every problem (NaN or infinite values, labels outside the
            likelihood's support), each with the key at fault and the fix.

    Warns:
        DataWarning: a class of ``0..K-1`` has no training rows (labels that are not
            0..K-1, such as 1-based ones, look like this).
    """
    where = source or dataset.source or "the dataset"
    problems = _finite_problems(dataset)
    held_out = [] if dataset.y_validation is None else [dataset.y_validation]
    labels = np.concatenate([dataset.y_train, dataset.y_test, *held_out])
    if not problems:
        problems = label_problems(labels, likelihood_name, dataset.num_classes, dataset.target)
    if problems:
        raise DataError(problems, where)
    if likelihood_name == "categorical" and dataset.num_classes and len(dataset.y_train):
        absent = sorted(set(range(dataset.num_classes)) - set(np.unique(dataset.y_train).tolist()))
        if absent:
            _warn_once(
                f"data.target: class{'es' if len(absent) > 1 else ''} {_values(absent)} of "
                f"0..{dataset.num_classes - 1} {'have' if len(absent) > 1 else 'has'} no training rows "
                f"in {dataset.target}; the model still gets an output per class. If the labels "
                "are not 0..K-1 (1-based, or codes), relabel them",
                where,
            )


def standardize(
    x_train: np.ndarray, x_test: np.ndarray, columns: Sequence[str], where: str, path: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale every column by its training mean and standard deviation.

    A column constant in the training rows is centred only: divided by a zero spread it
    would turn any other test value into ±1e8. It is kept, with a :class:`DataWarning`
    naming it (once per ``path``, default ``where``), since it is harmless to the fit
    and may vary in other data.
    """
    mean, spread = x_train.mean(0), x_train.std(0)
    constant = spread == 0
    if constant.any():
        names = [repr(str(name)) for name, flat in zip(columns, constant) if flat]
        many = len(names) > 1
        _warn_once(
            f"data.standardize: column{'s' if many else ''} {_values(names)} of {where} "
            f"{'are' if many else 'is'} constant in the training rows and so carr{'y' if many else 'ies'} "
            f"no information; centred, not scaled. Drop {'them' if many else 'it'} to silence this warning",
            path or where,
        )
    # 1e-8 keeps the scale of every other column as it always was (and with it the digest).
    spread = np.where(constant, 1.0, spread + 1e-8)
    return (x_train - mean) / spread, (x_test - mean) / spread
