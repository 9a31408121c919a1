"""Text as token windows for a next-token likelihood, with a byte-level tokenizer that
needs nothing downloaded.

A corpus is a list of documents (a CSV column, or plain text files, one per document).
Each document is encoded on its own (UTF-8 bytes: token ids 0–255, a vocabulary of 256)
and cut into windows of ``length`` tokens every ``stride`` tokens; a window never spans
two documents, and a document shorter than one window gives none. Inputs are the windows
(n, L), targets their last ``scored`` tokens (n, S) (:mod:`bayesflow.llm.problem`).
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bayesflow.errors import DataError

__all__ = [
    "BYTE_VOCABULARY", "Episodes", "byte_encode", "check_sizes", "episode_windows", "read_csv_column",
    "read_text_files", "token_windows",
]

BYTE_VOCABULARY = 256


def byte_encode(text: str) -> np.ndarray:
    """The UTF-8 bytes of ``text`` as token ids (int64)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def token_windows(
    documents: Sequence[str], length: int, stride: int, scored: int, where: str = "data"
) -> tuple[np.ndarray, np.ndarray]:
    """Byte-token windows of every document: inputs (n, length), targets (n, scored).

    Raises:
        DataError: bad sizes, or no document as long as one window.
    """
    check_sizes(length, stride, scored, where)
    windows = []
    for document in documents:
        ids = byte_encode(document)
        for start in range(0, ids.shape[0] - length + 1, stride):
            windows.append(ids[start : start + length])
    if not windows:
        longest = max((len(document.encode("utf-8")) for document in documents), default=0)
        raise DataError(
            f"{where}: no document is {length} bytes long (the longest has {longest}); "
            "use a shorter window length"
        )
    inputs = np.stack(windows)
    return inputs, inputs[:, length - scored :].copy()


class Episodes(NamedTuple):
    """Windows of a corpus split into episodes, in the layout of
    :func:`bayesflow.continual.fit_continual` (data, and the episode of every row)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    episode_train: np.ndarray
    episode_test: np.ndarray


def episode_windows(
    documents: Sequence[str], length: int, stride: int, scored: int,
    test_fraction: float = 0.15, where: str = "data",
) -> Episodes:
    """One episode per document: training windows from its first ``1 − test_fraction`` of
    bytes, test windows from the rest (the posteriors paper holds out the last 15% of each
    book); no window spans the split.

    Raises:
        DataError: a bad fraction, or a document too short to give a window on each side.
    """
    if not 0 < test_fraction < 1:
        raise DataError(f"{where}.test_fraction: must lie in (0, 1), got {test_fraction}")
    if not documents:
        raise DataError(f"{where}: no documents")
    check_sizes(length, stride, scored, where)
    parts: list[list[np.ndarray]] = [[], [], [], [], [], []]
    for index, document in enumerate(documents):
        ids = byte_encode(document)
        cut = round(ids.shape[0] * (1 - test_fraction))
        for offset, piece in ((0, ids[:cut]), (2, ids[cut:])):
            starts = range(0, piece.shape[0] - length + 1, stride)
            if not starts:
                raise DataError(
                    f"{where}: document {index} ({ids.shape[0]} bytes) gives no "
                    f"{'training' if offset == 0 else 'test'} window of {length} bytes with "
                    f"test_fraction {test_fraction}; use a shorter length or longer documents"
                )
            windows = np.stack([piece[start : start + length] for start in starts])
            parts[offset].append(windows)
            parts[offset + 1].append(windows[:, length - scored :])
            parts[4 + offset // 2].append(np.full(windows.shape[0], index, dtype=np.int64))
    x_train, y_train, x_test, y_test, episode_train, episode_test = (np.concatenate(p) for p in parts)
    return Episodes(x_train, y_train, x_test, y_test, episode_train, episode_test)


def check_sizes(length: int, stride: int, scored: int, where: str = "data") -> None:
    """Refuse a ``scored`` outside [1, length) or a ``stride`` below 1 (a DataError)."""
    if not 1 <= scored < length:
        raise DataError(f"{where}: scored ({scored}) must be at least 1 and below length ({length})")
    if stride < 1:
        raise DataError(f"{where}: stride must be at least 1, got {stride}")


def read_csv_column(path: Path, column: str, where: str = "data") -> list[str]:
    """The non-empty values of ``column`` in a CSV file (``.csv`` or ``.csv.gz``).

    Raises:
        DataError: the file is missing, not UTF-8, or has no such column.
    """
    raw = _read_bytes(path, where)
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    text = _decode(raw, path, where)
    reader = csv.DictReader(io.StringIO(text))
    if column not in (reader.fieldnames or []):
        raise DataError(
            f"{where}.column: {path.name} has no column {column!r}; "
            f"its columns are: {', '.join(reader.fieldnames or []) or 'none'}"
        )
    return [row[column] for row in reader if row[column]]


def read_text_files(paths: Sequence[Path], where: str = "data") -> list[str]:
    """The text of each file, one document each.

    Raises:
        DataError: a file is missing, empty or not UTF-8.
    """
    documents = []
    for path in paths:
        text = _decode(_read_bytes(path, where), path, where)
        if not text.strip():
            raise DataError(f"{where}: {str(path)!r} is empty")
        documents.append(text)
    return documents


def _read_bytes(path: Path, where: str) -> bytes:
    if not path.is_file():
        raise DataError(f"{where}: no file {str(path)!r}")
    return path.read_bytes()


def _decode(raw: bytes, path: Path, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{where}: {str(path)!r} is not UTF-8 text (byte {error.start}: "
            f"{raw[error.start:error.start + 1]!r}); convert it to UTF-8"
        ) from error
