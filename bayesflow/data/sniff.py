"""What a data file holds, checked before a parser reads it (torch-free).

A parser given the wrong file fails in its own words, or worse: pandas reads a gzip
file named ``.csv`` as a decoding error, echoes a 100 MB header back in a message, and
turns a first row of three million fields into a three-million-level index for minutes.
:func:`check_text` reads the file once, in blocks, and refuses with a short message that
names the file, what it seems to be and what was expected:

- a known binary format (gzip, zip or ``.npz``, ``.npy``, PNG, JPEG, PDF, Parquet, ...),
  with the fix when there is one (a gzip file named ``.csv``: name it ``.csv.gz``);
- other binary data (NUL bytes or many control characters);
- text that is not UTF-8 (the byte and its line);
- a line longer than :data:`MAX_LINE_BYTES`;
- a first data row with more fields than the header (pandas would shift every column).

Messages quote at most a short, printable excerpt of the file (:func:`excerpt`).
"""

from __future__ import annotations

import bz2
import codecs
import csv as csv_module
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from bayesflow.errors import DataError

__all__ = ["MAX_LINE_BYTES", "check_text", "excerpt", "first_row_problem", "names"]

# At least BLOCK (see check_text). A row of 100,000 numbers written with ten digits each is about 1 MB; a line of more than
# 16 MiB is no row of a table (nor an IMDB review: the longest is about 14 KB).
MAX_LINE_BYTES = 16 * 1024 * 1024
BLOCK = 1024 * 1024
# Known binary formats by their first bytes, with what to do about the common mistakes.
MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"\x1f\x8b", "a gzip-compressed file", "name it {name}.gz (it is then decompressed as it is read), or decompress it with gunzip"),
    (b"PK\x03\x04", "a zip archive (a .zip, .npz or .xlsx file)", "extract or export the table as CSV text"),
    (b"\x93NUMPY", "a NumPy .npy array", "save the array as CSV text (numpy.savetxt with a header), or load it with `data: {name: python}`"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image", "point data.path at the table, not an image"),
    (b"\xff\xd8\xff", "a JPEG image", "point data.path at the table, not an image"),
    (b"GIF8", "a GIF image", "point data.path at the table, not an image"),
    (b"%PDF", "a PDF document", "export the table as CSV text"),
    (b"PAR1", "a Parquet file", "convert it to CSV (pandas.read_parquet(...).to_csv(...))"),
    (b"\xd0\xcf\x11\xe0", "an Office document (an .xls file?)", "export the sheet as CSV text"),
    (b"BZh", "a bzip2-compressed file", "name it {name}.bz2, or decompress it with bunzip2"),
    (b"\xfd7zXZ\x00", "an xz-compressed file", "name it {name}.xz, or decompress it with unxz"),
    (b"(\xb5/\xfd", "a zstd-compressed file", "decompress it with unzstd"),
    (b"SQLite format 3\x00", "an SQLite database", "export the table as CSV text"),
    (b"\x7fELF", "an executable", "point data.path at the data file"),
)
OPENERS: dict[str, Callable[..., IO[Any]]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Control characters other than tab, newline, carriage return, form feed and vertical tab.
_CONTROL = bytes(set(range(32)) - {9, 10, 11, 12, 13})


def excerpt(text: str | bytes, limit: int = 40) -> str:
    """At most ``limit`` characters of ``text``, control characters escaped, quoted."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in text[:limit])
    return repr(shown + ("…" if len(text) > limit else ""))


def names(items: Iterable[object], limit: int = 8) -> str:
    """``a, b, c, ... (120 in all)``: the first ``limit`` names, each shortened."""
    listed = list(items)
    shown = [str(item) if len(str(item)) <= 30 else excerpt(str(item), 30) for item in listed[:limit]]
    more = f", ... ({len(listed)} in all)" if len(listed) > limit else ""
    return ", ".join(shown) + more


def _refuse(file: Path, problem: str) -> DataError:
    return DataError(f"data.path: {file.name} {problem}", str(file))


def _blocks(stream: IO[bytes]) -> Iterator[bytes]:
    while block := stream.read(BLOCK):
        yield block


def _binary(head: bytes) -> bool:
    sample = head[:4096]
    return b"\x00" in sample or sum(sample.count(bytes([c])) for c in _CONTROL) > len(sample) // 20


def _check_head(file: Path, head: bytes, compressed: bool, expected: str) -> None:
    for magic, kind, fix in MAGIC:
        if head.startswith(magic):
            where = "decompressed, it is" if compressed else "it is"
            raise _refuse(file, f"is not text: {where} {kind}; expected {expected}; {fix.format(name=file.name)}")
    if _binary(head):
        raise _refuse(
            file, f"is not text: it holds binary data (it starts {excerpt(head[:16], 16)}); expected {expected}"
        )


def check_text(file: Path, expected: str, max_line: int = MAX_LINE_BYTES) -> None:
    """Refuse ``file`` unless it is UTF-8 text with lines under ``max_line`` bytes (a
    ``.gz``, ``.bz2`` or ``.xz`` file is checked as it decompresses).

    Args:
        file: the data file.
        expected: what it should be, for the message (``a UTF-8 text file of
            comma-separated values with a header row``).
        max_line: the longest line allowed, in bytes.

    Raises:
        DataError: naming the file, what it holds and the fix, in a few hundred characters.
    """
    opener = OPENERS.get(file.suffix.lower())
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, line, line_start = 0, 1, 0
    try:
        with (opener(file, "rb") if opener else file.open("rb")) as stream:
            for block in _blocks(stream):
                if offset == 0:
                    _check_head(file, block, opener is not None, expected)
                pending = len(decoder.getstate()[0])  # bytes of a character cut by the last block
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as error:
                    at = max(0, error.start - pending)
                    line += block.count(b"\n", 0, at)
                    raise _refuse(
                        file, f"is not UTF-8 text (byte 0x{error.object[error.start]:02x} on line {line}, "
                        f"at offset {offset + at}); expected {expected}: save it as UTF-8"
                    ) from None
                # A line longer than a block (max_line >= BLOCK) spans blocks: checking where
                # each block's first line ends, then counting its newlines in C, finds it.
                first = block.find(b"\n")
                if offset + (first if first != -1 else len(block)) - line_start > max_line:
                    raise _refuse(
                        file, f"has a line over {max_line // (1024 * 1024)} MiB long (line {line}); "
                        f"expected {expected}, one row per line: is this the file you meant?"
                    )
                if first != -1:
                    line += block.count(b"\n")
                    line_start = offset + block.rfind(b"\n") + 1
                offset += len(block)
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise _refuse(
            file, f"cannot be decompressed as its name ({file.suffix}) says ({excerpt(str(error), 80)}); "
            f"expected {expected}: check the file, or rename it"
        ) from None


def first_row_problem(file: Path) -> str | None:
    """``line 2 has 9 fields, the header 3 (a, b, y)`` when the first data row has more
    fields than the header (pandas would make the first columns an index and shift every
    value), else None. Reads two rows at most."""
    opener = OPENERS.get(file.suffix.lower())
    limit = csv_module.field_size_limit()
    csv_module.field_size_limit(MAX_LINE_BYTES)
    try:
        text = opener(file, "rt", encoding="utf-8", newline="") if opener else file.open(newline="", encoding="utf-8")
        with text as stream:
            rows = csv_module.reader(stream)
            header = next(rows, [])
            row = next(rows, [])
            if len(row) > len(header):
                return (
                    f"line {rows.line_num} has {len(row)} fields, the header {len(header)} "
                    f"({names(header)}); give every row one value per column"
                )
    except (OSError, EOFError, UnicodeDecodeError, csv_module.Error, zlib.error, lzma.LZMAError):
        return None
    finally:
        csv_module.field_size_limit(limit)
    return None
