"""What every loader returns (:class:`Dataset`), the registry of loaders, and the pieces
they share: resolving a spec's data path and splitting into train and test (torch-free)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.errors import DataError
from bayesflow.registry import Registry

__all__ = ["DATASETS", "Dataset", "hold_out_validation", "resolve_path", "split", "validation_rows"]

DATASETS: Registry[Any] = Registry("dataset")


@dataclass(frozen=True)
class Dataset:
    """Train and test arrays; ``task`` is ``"classification"`` or ``"regression"``.

    ``x_validation`` and ``y_validation`` (both or neither) are rows held out of training
    to choose settings on (``data.validation_fraction``, a CSV's ``split_column``), so
    that the test rows are only reported on.

    ``source`` (a file path or the dataset's name) and ``target`` (what the labels are
    called there) only serve to name the data in messages; the digest ignores them.
    ``salt`` is what else the digest covers: the source of the user's module that made
    the arrays (``data: {name: python}``), so that editing it recomputes the stages.
    ``reference`` holds the class probabilities of ``evaluate.reference.file``
    (:mod:`bayesflow.data.reference`), one row per compared point; the digest ignores it
    too (it is part of the evaluations' keys, not the fits'), and so does ``statements``, the
    in-distribution texts of ``evaluate.statements`` then each out-of-distribution set's
    (:mod:`bayesflow.data.statements`), and ``shifts``, named distribution-shift sets of
    inputs and targets (``multiple_choice``'s ``data.shift``). ``continuation_tokens`` is the
    most continuation tokens of one question (all its choices', in every set) of
    ``multiple_choice`` data scored as continuations (None otherwise).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str
    num_classes: int | None = None
    x_ood: np.ndarray | None = None
    episode_train: np.ndarray | None = None
    episode_test: np.ndarray | None = None
    source: str = ""
    target: str = "the labels"
    salt: str = ""
    x_validation: np.ndarray | None = None
    y_validation: np.ndarray | None = None
    reference: np.ndarray | None = None
    statements: tuple[tuple[str, ...], ...] | None = None
    shifts: tuple[tuple[str, np.ndarray, np.ndarray], ...] = ()
    continuation_tokens: int | None = None

    @property
    def has_validation(self) -> bool:
        """Whether rows are held out for validation."""
        return self.y_validation is not None and len(self.y_validation) > 0

    @property
    def num_features(self) -> int:
        """Number of input features."""
        return int(self.x_train.shape[1])

    @property
    def digest(self) -> str:
        """SHA-256 over the four arrays' bytes, shapes and dtypes (and the ``salt``).

        The OOD and validation arrays join it only when there are some, so data without
        them keep the digest (and every cached stage) they had before those existed.
        """
        digest = hashlib.sha256(self.salt.encode()) if self.salt else hashlib.sha256()
        arrays = [self.x_train, self.y_train, self.x_test, self.y_test]
        if self.x_ood is not None:
            arrays.append(self.x_ood)
        if self.x_validation is not None and self.y_validation is not None:
            digest.update(b"validation\0")
            arrays.extend([self.x_validation, self.y_validation])
        for array in arrays:
            digest.update(str((array.shape, array.dtype.str)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


def resolve_path(path: str, base_dir: Path | None = None) -> Path:
    """Resolve a spec's data path: ``package:NAME`` or relative to the spec's folder."""
    if path.startswith("package:"):
        name = path.split(":", 1)[1]
        resolved = Path(str(resources.files("bayesflow.data") / "files" / name))
    else:
        resolved = Path(path).expanduser()
        if not resolved.is_absolute() and base_dir is not None:
            candidate = base_dir / resolved
            resolved = candidate if candidate.exists() or not resolved.exists() else resolved
    return resolved


def split_problems(
    labels: np.ndarray, test_fraction: float, stratify: bool, where: str, held: str = "test"
) -> list[str]:
    """Why ``labels`` cannot be split into train and test as asked ([] when they can).

    The sizes are scikit-learn's: ``ceil(test_fraction * n)`` rows to test, the rest to
    train; a stratified split (class shares kept) also needs two rows of every class and
    room for every class on both sides. ``held="validation"`` words the problems for the
    validation rows taken out of the training rows (``data.validation_fraction``).
    """
    key, verb = f"data.{held}_fraction", "validate" if held == "validation" else held
    count = len(labels)
    tested = math.ceil(test_fraction * count)
    trained = count - tested
    if trained < 1 or tested < 1:
        return [(
            f"{key}: {where} has {count} data row{'s' if count != 1 else ''}: a {held} "
            f"fraction of {test_fraction:g} leaves {trained} to train and {tested} to {verb}, and each "
            f"needs at least one; add rows, or change {key}"
        )]
    if not stratify:
        return []
    classes, counts = np.unique(labels, return_counts=True)
    single = [str(label) for label, size in zip(classes.tolist(), counts.tolist()) if size < 2]
    if single:
        return [(
            f"data.target: class{'es' if len(single) > 1 else ''} {', '.join(single[:5])} of {where} "
            f"{'have' if len(single) > 1 else 'has'} a single row; the split keeps each class's share "
            "on both sides, so every class needs at least two rows: add rows, or drop that class"
        )]
    if min(tested, trained) < len(classes):
        return [(
            f"{key}: {where} has {len(classes)} classes but a {held} fraction of "
            f"{test_fraction:g} of {count} rows leaves {trained} to train and {tested} to {verb}; "
            f"each side needs a row of every class: add rows, or change {key}"
        )]
    return []


def split(
    x: np.ndarray,
    y: np.ndarray,
    test_fraction: float,
    seed: int,
    stratify: bool,
    where: str,
    path: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x_train, y_train, x_test, y_test`` (stratified by ``y`` with ``stratify``).

    Raises:
        DataError: too few rows, or too few of a class, for the split; ``where`` names
            the data in each problem, ``path`` (default ``where``) heads the message.
    """
    from bayesflow.data.splits import split_indices

    problems = split_problems(y, test_fraction, stratify, where)
    if problems:
        raise DataError(problems, path or where)
    try:  # train_test_split's rows, remembered: scikit-learn is not imported again
        train, test = split_indices(y, test_fraction, seed, stratify)
    except ValueError as error:  # a case split_problems does not foresee: still say where
        raise DataError(f"data: {where} cannot be split into train and test: {error}", path or where) from error
    return x[train], y[train], x[test], y[test]


def hold_out_validation(
    x: np.ndarray,
    y: np.ndarray,
    fraction: float,
    seed: int,
    stratify: bool,
    where: str,
    path: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``x_train, y_train, x_validation, y_validation``: the training rows ``x, y`` less
    those :func:`validation_rows` holds out (None, None when ``fraction`` is 0)."""
    if not fraction:
        return x, y, None, None
    train, validation = validation_rows(y, fraction, seed, stratify, where, path)
    return x[train], y[train], x[validation], y[validation]


def validation_rows(
    y: np.ndarray, fraction: float, seed: int, stratify: bool, where: str, path: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` indices of the training labels ``y``: ``ceil(fraction * n)``
    rows held out for validation (stratified by ``y`` with ``stratify``), drawn as the
    train/test split is, from ``seed``, and remembered with it (:mod:`bayesflow.data.splits`).

    Raises:
        DataError: too few training rows, or too few of a class, to hold some out.
    """
    from bayesflow.data.splits import split_indices

    rows = f"the training part of {where}"
    problems = split_problems(y, fraction, stratify, rows, held="validation")
    if problems:
        raise DataError(problems, path or where)
    try:
        return split_indices(y, fraction, seed, stratify)
    except ValueError as error:
        raise DataError(f"data.validation_fraction: {rows} cannot be split: {error}", path or where) from error
