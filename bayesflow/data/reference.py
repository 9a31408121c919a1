"""Reference class probabilities read from a CSV file (``evaluate.reference.file``).

The file holds one row per point the fits are compared on (the test rows in their order;
the training rows when ``data.test_fraction`` is 0) and one column per class (two for a
``bernoulli`` likelihood: p(y = 0), p(y = 1)), each row a probability vector; a first
row of names is a header and is skipped. It is read once, by the driver, with the data
(:func:`with_reference`), so that it travels to the stages with them; a file that cannot
serve is a spec error pointed at ``evaluate.reference.file`` (exit code 3), naming the
lines at fault.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.data.dataset import Dataset, resolve_path
from bayesflow.errors import SpecError

__all__ = ["SUM_TOLERANCE", "comparison_rows", "read_reference", "reference_digest", "with_reference"]

KEY = "evaluate.reference.file"
# How far a row's sum may be from 1: probabilities written with three decimals (0.333,
# 0.333, 0.333) are still read as the distribution they round; rows are renormalised.
SUM_TOLERANCE = 1e-3
# Lines listed in a message at most; the count says how many there are in all.
SHOWN = 3


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:SHOWN])) + (", ..." if len(numbers) > SHOWN else "")
    return f"line{'s' if len(numbers) > 1 else ''} {shown}"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _parse(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """The values (n, C) and the file line of each row, the header skipped.

    Raises:
        SpecError: the file is missing, empty, ragged or holds a value that is no number.
    """
    if not file.is_file():
        raise SpecError(f"{KEY}: file {str(file)!r} does not exist; fix the path")
    try:
        with file.open(newline="", encoding="utf-8") as stream:
            rows = [(number, row) for number, row in enumerate(csv.reader(stream), start=1) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise SpecError(f"{KEY}: {file.name} cannot be read as CSV ({error}); give one row of "
                        "class probabilities per point") from error
    if rows and all(_number(field) is None for field in rows[0][1]):
        rows = rows[1:]  # a header row of class names
    if not rows:
        raise SpecError(f"{KEY}: {file.name} holds no rows of probabilities; give one row per point")
    width = len(rows[0][1])
    ragged = [number for number, row in rows if len(row) != width]
    if ragged:
        raise SpecError(f"{KEY}: {file.name} has rows of {width} values and rows of other lengths "
                        f"({_lines(ragged)}); give every row one value per class")
    bad = [(number, field) for number, row in rows for field in row if _number(field) is None]
    if bad:
        raise SpecError(f"{KEY}: {file.name} holds values that are not numbers ({bad[0][1].strip()!r} "
                        f"on {_lines([number for number, _ in bad])}); give probabilities only")
    values = np.array([[float(field) for field in row] for _, row in rows], dtype=np.float64)
    return values, np.array([number for number, _ in rows])


def read_reference(path: str, base_dir: Path | None = None) -> np.ndarray:
    """The (n, C) reference probabilities of a CSV file, each row renormalised to sum to 1.

    Raises:
        SpecError: naming ``evaluate.reference.file`` and the lines at fault: the file is
            missing or unreadable, a value is no number, not finite or negative, or a row
            does not sum to 1 within :data:`SUM_TOLERANCE`.
    """
    file = resolve_path(path, base_dir)
    values, lines = _parse(file)
    problems = []
    finite = np.isfinite(values).all(axis=1)
    if not finite.all():
        problems.append(f"{KEY}: {file.name} holds NaN or infinite values ({_lines(lines[~finite].tolist())}); "
                        "give probabilities in [0, 1]")
    negative = finite & (values < 0).any(axis=1)
    if negative.any():
        problems.append(f"{KEY}: {file.name} holds negative values ({_lines(lines[negative].tolist())}); "
                        "give probabilities in [0, 1]")
    sums = values.sum(axis=1)
    off = finite & ~negative & (np.abs(sums - 1) > SUM_TOLERANCE)
    if off.any():
        first = int(np.flatnonzero(off)[0])
        problems.append(f"{KEY}: {file.name} has rows that do not sum to 1 within {SUM_TOLERANCE:g} "
                        f"({_lines(lines[off].tolist())}; line {lines[first]} sums to "
                        f"{sums[first]:.6g}); give each point's class probabilities")
    if problems:
        raise SpecError(problems)
    return values / sums[:, None]


def comparison_rows(dataset: Dataset) -> tuple[int, str]:
    """How many points the fits are compared on, and which: the test rows, or the
    training rows when none are held out."""
    if len(dataset.y_test):
        return len(dataset.y_test), "test rows"
    return len(dataset.y_train), "training rows (data.test_fraction is 0)"


def reference_digest(dataset: Dataset) -> str | None:
    """SHA-256 of what evaluations read beside the data (part of every evaluation's key):
    the reference probabilities, the statements of ``evaluate.statements``
    (:mod:`bayesflow.data.statements`) and the shift sets (``data.shift``); None when they
    have none of them."""
    from bayesflow.data.statements import statements_digest

    statements = statements_digest(dataset)
    if dataset.reference is None and not dataset.shifts:
        return statements
    digest = hashlib.sha256()
    if dataset.reference is not None:
        digest.update(str(dataset.reference.shape).encode())
        digest.update(np.ascontiguousarray(dataset.reference).tobytes())
    if statements is not None:
        digest.update(statements.encode())
    for name, inputs, labels in dataset.shifts:
        digest.update(f"shift\0{name}\0".encode())
        for array in (inputs, labels):
            digest.update(str((array.shape, array.dtype.str)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def with_reference(dataset: Dataset, spec: Any, base_dir: Path | None) -> Dataset:
    """``dataset`` carrying the spec's reference probabilities (``evaluate.reference.file``),
    checked against it: one row per compared point, one column per class. Unchanged
    when the spec names no reference file.

    Raises:
        SpecError: the file cannot serve (see :func:`read_reference`), or its shape does
            not match the data.
    """
    reference = spec.evaluate.reference
    if reference is None or reference.file is None:
        return dataset
    probabilities = read_reference(reference.file, base_dir)
    name = resolve_path(reference.file, base_dir).name
    rows, which = comparison_rows(dataset)
    classes = 2 if spec.likelihood.name == "bernoulli" else dataset.num_classes
    problems = []
    if probabilities.shape[0] != rows:
        problems.append(f"{KEY}: {name} has {probabilities.shape[0]} rows, but the fits are "
                        f"compared on {rows} {which}; give one row per point, in their order")
    if classes is not None and probabilities.shape[1] != classes:
        problems.append(f"{KEY}: {name} has {probabilities.shape[1]} columns, but the data have "
                        f"{classes} classes" + (" (bernoulli: p(y=0), p(y=1))" if spec.likelihood.name
                                                == "bernoulli" else "") + "; give one column per class")
    if problems:
        raise SpecError(problems)
    return replace(dataset, reference=probabilities)
