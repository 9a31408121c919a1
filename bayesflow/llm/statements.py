"""Statements whose last word a language model completes: the in-distribution set read
from a file, an out-of-distribution stand-in by a letter cipher, and their tokens.

The evaluation (issue 23, item 5; the posteriors paper's Section 5.3) asks a model for
the last word of short statements and compares how uncertain its posterior is on
statements like its training texts and on statements unlike them. The scoring is
:mod:`bayesflow.llm.statement_scores`; this module holds the text side:

- a **statements file** is UTF-8 text, one statement per line; blank lines and lines
  whose first non-blank character is ``#`` are skipped;
- a statement's **scored word** is its last word: the characters after its last space,
  with one final ``.``, ``!`` or ``?`` dropped; the **context** is everything before the
  word, that space included (:func:`split_statement`);
- :func:`cipher` is the out-of-distribution stand-in: every letter replaced through one
  seeded permutation of the alphabet (the same permutation on a–z and on A–Z), every
  other character kept. Spaces, punctuation, digits and the length of each word stay,
  and so do the statements' grammar and letter statistics under relabelling, but the
  words are ones no English corpus contains: a model trained on English text has never
  seen them. The paper's out-of-distribution set is its statements translated into
  Samoan; at CPU scale, with a small model pretrained on the project's own English
  corpus, a cipher is the honest equivalent of "a language the model has never read".
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bayesflow.errors import DataError
from bayesflow.llm.text import byte_encode

__all__ = [
    "WORD_END", "EncodedStatement", "cipher", "cipher_table", "encode_statements",
    "numbered_statements", "read_statements", "split_statement",
]

# Punctuation that ends a statement and is not part of its scored word.
WORD_END = ".!?"

Encoder = Callable[[str], Any]


def read_statements(path: Path, where: str = "evaluate.statements") -> list[str]:
    """The statements of a file: its non-blank lines that are not ``#`` comments, each
    stripped of surrounding whitespace.

    Raises:
        DataError: as :func:`numbered_statements`.
    """
    return [statement for _, statement in numbered_statements(path, where)]


def numbered_statements(path: Path, where: str = "evaluate.statements") -> list[tuple[int, str]]:
    """The statements of a file (:func:`read_statements`), each with its 1-based line.

    Raises:
        DataError: the file is missing, not UTF-8 (naming the line), holds no statement,
            or a statement has no last word to score or no context before it (naming the
            line).
    """
    if not path.is_file():
        raise DataError(f"{where}: no file {str(path)!r}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad_line = raw[: error.start].count(b"\n") + 1
        raise DataError(
            f"{where}: {str(path)!r} line {bad_line} is not UTF-8 text (byte {error.start}: "
            f"{raw[error.start:error.start + 1]!r}); convert the file to UTF-8"
        ) from error
    statements: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        statement = line.strip()
        if not statement or statement.startswith("#"):
            continue
        split_statement(statement, f"{where}: {str(path)!r} line {number}")
        statements.append((number, statement))
    if not statements:
        raise DataError(
            f"{where}: {str(path)!r} holds no statement (its {len(text.splitlines())} lines are "
            "blank or # comments); write one statement per line"
        )
    return statements


def split_statement(statement: str, where: str = "statement") -> tuple[str, str]:
    """``(context, word)``: the word is the text after the last space without one final
    ``.``, ``!`` or ``?``; the context is everything before it, that space included.

    Raises:
        DataError: no space (nothing to read before the word), or no word after it.
    """
    text = statement.strip()
    cut = text.rfind(" ")
    word = text[cut + 1 :]
    if word and word[-1] in WORD_END:
        word = word[:-1]
    if cut < 0 or not word:
        raise DataError(
            f"{where}: {statement!r} needs at least two words: a context and a last word "
            f"to complete (a final {' '.join(WORD_END)} is not part of the word)"
        )
    return text[: cut + 1], word


def cipher_table(seed: int) -> dict[int, int]:
    """The letter substitution of ``seed``: a permutation of a–z drawn by NumPy's
    ``default_rng(seed)``, applied alike to the capitals (a ``str.translate`` table)."""
    order = np.random.default_rng(seed).permutation(26)
    lower = "".join(string.ascii_lowercase[index] for index in order)
    return str.maketrans(string.ascii_lowercase + string.ascii_uppercase, lower + lower.upper())


def cipher(statements: Sequence[str], seed: int = 0) -> list[str]:
    """``statements`` with every ASCII letter substituted through :func:`cipher_table`
    (a bijection on letters; every other character kept): the out-of-distribution
    stand-in of the module docstring. The same seed gives the same substitution."""
    table = cipher_table(seed)
    return [statement.translate(table) for statement in statements]


class EncodedStatement(NamedTuple):
    """One statement as tokens: ``tokens`` (int64, context then word) and ``start``, the
    index of the word's first token (the context's length in tokens)."""

    tokens: np.ndarray
    start: int


def encode_statements(
    statements: Sequence[str], encoder: Encoder = byte_encode, where: str = "evaluate.statements"
) -> list[EncodedStatement]:
    """Tokens of each statement's context and of its word, each encoded on its own and
    joined (so the word's tokens are exactly ``encoder(word)``).

    Args:
        statements: the statements (:func:`split_statement` splits each).
        encoder: text to token ids; the UTF-8 bytes by default, or a model folder's
            tokenizer (which must add no special tokens to the word: a beginning-of-text
            token, if any, belongs in front of the context only).
        where: the spec location errors name.

    Raises:
        DataError: a statement whose context or word encodes to no token.
    """
    encoded = []
    for index, statement in enumerate(statements):
        context, word = split_statement(statement, f"{where}: statement {index}")
        before = np.asarray(encoder(context), dtype=np.int64).reshape(-1)
        after = np.asarray(encoder(word), dtype=np.int64).reshape(-1)
        if before.size == 0 or after.size == 0:
            raise DataError(f"{where}: statement {index} ({statement!r}) encodes to no "
                            f"{'context' if before.size == 0 else 'word'} token")
        encoded.append(EncodedStatement(np.concatenate([before, after]), int(before.size)))
    return encoded
