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
    "BYTE_VOCABULARY", "Episodes", "byte_encode", "check_sizes", "document_parts", "encoded_episodes",
    "episode_windows", "read_csv_column", "read_text_files", "token_windows", "windows_of",
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
    inputs = np.concatenate([windows_of(byte_encode(document), length, stride) for document in documents]
                            or [np.zeros((0, length), dtype=np.int64)])
    if not inputs.shape[0]:
        longest = max((len(document.encode("utf-8")) for document in documents), default=0)
        raise DataError(
            f"{where}: no document is {length} bytes long (the longest has {longest}); "
            "use a shorter window length"
        )
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
    return encoded_episodes([byte_encode(document) for document in documents], length, stride,
                            scored, test_fraction, where)


def encoded_episodes(
    encoded: Sequence[np.ndarray], length: int, stride: int, scored: int,
    test_fraction: float = 0.15, where: str = "data",
) -> Episodes:
    """:func:`episode_windows` of documents already encoded as token ids (1-D int64)."""
    if not 0 < test_fraction < 1:
        raise DataError(f"{where}.test_fraction: must lie in (0, 1), got {test_fraction}")
    if not encoded:
        raise DataError(f"{where}: no documents")
    check_sizes(length, stride, scored, where)
    parts: list[list[np.ndarray]] = [[], [], [], [], [], []]
    for index, ids in enumerate(encoded):
        train, _, test = document_parts(ids, length, stride, test_fraction)
        for offset, windows in ((0, train), (2, test)):
            if not windows.shape[0]:
                raise DataError(
                    f"{where}: document {index} ({ids.shape[0]} tokens) gives no "
                    f"{'training' if offset == 0 else 'test'} window of {length} tokens with "
                    f"test_fraction {test_fraction}; use a shorter length or longer documents"
                )
            parts[offset].append(windows)
            parts[offset + 1].append(windows[:, length - scored :])
            parts[4 + offset // 2].append(np.full(windows.shape[0], index, dtype=np.int64))
    x_train, y_train, x_test, y_test, episode_train, episode_test = (np.concatenate(p) for p in parts)
    return Episodes(x_train, y_train, x_test, y_test, episode_train, episode_test)


def windows_of(ids: np.ndarray, length: int, stride: int) -> np.ndarray:
    """The windows of ``length`` tokens every ``stride`` tokens of one document, (k, length)."""
    if ids.shape[0] < length:
        return np.zeros((0, length), dtype=np.int64)
    return np.lib.stride_tricks.sliding_window_view(ids, length)[::stride].astype(np.int64)


def document_parts(
    ids: np.ndarray, length: int, stride: int, test_fraction: float, validation_fraction: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training, validation and test windows of one document, cut by position: its last
    ``test_fraction`` of tokens are test, the ``validation_fraction`` before them
    validation, the rest training; no window spans a cut (a part shorter than a window
    gives none)."""
    count = ids.shape[0]
    test_cut = round(count * (1 - test_fraction))
    validation_cut = round(count * (1 - test_fraction - validation_fraction))
    pieces = (ids[:validation_cut], ids[validation_cut:test_cut], ids[test_cut:])
    train, validation, test = (windows_of(piece, length, stride) for piece in pieces)
    return train, validation, test


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


def read_text_files(paths: Sequence[Path], where: str | Sequence[str] = "data") -> list[str]:
    """The text of each file, one document each; ``where`` names the spec key of every
    file (one for all, or one per file, such as ``data.files.2``).

    Raises:
        DataError: a file is missing, empty or not UTF-8.
    """
    keys = [where] * len(paths) if isinstance(where, str) else list(where)
    documents = []
    for path, key in zip(paths, keys):
        text = _decode(_read_bytes(path, key), path, key)
        if not text.strip():
            raise DataError(f"{key}: {str(path)!r} is empty; give a file with text in it")
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
