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

import numpy as np

from bayesflow.errors import DataError

__all__ = ["BYTE_VOCABULARY", "byte_encode", "read_csv_column", "read_text_files", "token_windows"]

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
    if not 1 <= scored < length:
        raise DataError(f"{where}: scored ({scored}) must be at least 1 and below length ({length})")
    if stride < 1:
        raise DataError(f"{where}: stride must be at least 1, got {stride}")
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
