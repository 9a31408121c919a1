"""Train/test row indices of scikit-learn's ``train_test_split``, remembered on disk.

Every run loads its data to know their digest, and the split was the one reason to import
scikit-learn (with scipy and pandas, ~1.5 s on 2 idle cores, several under load): most of
a no-op rerun of a small workflow. ``train_test_split`` draws its rows from the number of
rows, the labels (when stratified), the test size and the seed alone, so its indices are
kept, per scikit-learn version, in the user's cache folder (``$XDG_CACHE_HOME/bayesflow/
splits``, else ``~/.cache/bayesflow/splits``) and reused: the same rows, bit for bit, as
``train_test_split(x, y, ...)`` returns. A file that cannot be read or written is
ignored (the split is computed, as before); ``BAYESFLOW_SPLIT_CACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["split_folder", "split_indices"]


def split_folder() -> Path:
    """Where the remembered splits are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bayesflow" / "splits"


def split_indices(
    y: np.ndarray, test_fraction: float, seed: int, stratify: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` row indices, as ``train_test_split`` of ``len(y)`` rows draws them.

    Raises:
        ValueError: what ``train_test_split`` raises for a split it cannot make.
    """
    use = os.environ.get("BAYESFLOW_SPLIT_CACHE", "1") != "0"
    path = split_folder() / f"{_key(y, test_fraction, seed, stratify)}.npz" if use else None
    if path is not None:
        remembered = _read(path, len(y))
        if remembered is not None:
            return remembered
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(
        np.arange(len(y)), test_size=test_fraction, random_state=seed,
        stratify=y if stratify else None,
    )
    if path is not None:
        _write(path, train, test)
    return train, test


def _key(y: np.ndarray, test_fraction: float, seed: int, stratify: bool) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        sklearn = version("scikit-learn")
    except PackageNotFoundError:  # the import below says so
        sklearn = "missing"
    digest = hashlib.sha256()
    labels = np.ascontiguousarray(y) if stratify else np.empty(0)
    for part in ("1", sklearn, len(y), type(test_fraction).__name__, repr(test_fraction), seed,
                 stratify, labels.dtype.str, labels.shape):
        digest.update(f"{part}\0".encode())
    digest.update(labels.tobytes())
    return digest.hexdigest()[:32]


def _read(path: Path, rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The indices in ``path`` if it holds a valid split of ``rows`` rows, else None."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            train, test = saved["train"], saved["test"]
    except Exception:  # noqa: BLE001 - missing, unreadable or damaged: compute it
        return None
    every = np.concatenate([train, test]) if train.ndim == test.ndim == 1 else None
    if every is None or every.dtype.kind not in "iu" or len(every) != rows:
        return None
    if not np.array_equal(np.sort(every), np.arange(rows)):
        return None
    return train, test


def _write(path: Path, train: np.ndarray, test: np.ndarray) -> None:
    """Save atomically; any failure (read-only or full cache folder) is ignored."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(descriptor, "wb") as file:
                np.savez(file, train=train, test=test)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
