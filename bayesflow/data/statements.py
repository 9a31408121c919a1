"""The statement sets of ``evaluate.statements``, read with the data (torch-free).

They travel with the :class:`~bayesflow.data.Dataset` (``statements``: the in-distribution
and the out-of-distribution texts), as a reference file's probabilities do, so that an
evaluation on a machine without the spec's folder has them, and a file that cannot serve
is a spec error pointed at its key at validate (exit 3), before any fit. Their digest is
part of every evaluation's key (:func:`bayesflow.data.reference.reference_digest`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from bayesflow.data.dataset import Dataset, resolve_path
from bayesflow.errors import DataError, SpecError
from bayesflow.llm.statements import cipher, numbered_statements, read_statements, split_statement
from bayesflow.spec.statements import CIPHER

__all__ = ["KEY", "check_statement_lengths", "statement_encoder", "statement_sets", "statements_digest",
           "with_statements"]

KEY = "evaluate.statements"


def statement_sets(settings: Any, base_dir: Path | None) -> tuple[tuple[str, ...], ...]:
    """The in-distribution statements of ``settings`` (a ``StatementsSpec``), then each
    out-of-distribution set of :meth:`~bayesflow.spec.statements.StatementsSpec.ood_sets`
    in its order: a cipher of the in-distribution ones, or a file's.

    Raises:
        SpecError: a file is missing, empty, not UTF-8 or holds a line without a word to
            score, naming the key (``evaluate.statements.in_distribution``, ``.ood`` or
            ``.ood.<name>``).
    """
    inside = _read(settings.in_distribution, f"{KEY}.in_distribution", base_dir)
    sets = [tuple(inside)]
    for name, source in settings.ood_sets():
        if source == CIPHER:
            sets.append(tuple(cipher(inside, settings.cipher_seed)))
        else:
            sets.append(tuple(_read(source, _ood_key(settings, name), base_dir)))
    return tuple(sets)


def _ood_key(settings: Any, name: str) -> str:
    """The spec key of the OOD set ``name``: ``evaluate.statements.ood`` or ``.ood.<name>``."""
    return f"{KEY}.ood" if isinstance(settings.ood, str) else f"{KEY}.ood.{name}"


def _read(path: str, where: str, base_dir: Path | None) -> list[str]:
    try:
        return read_statements(resolve_path(path, base_dir), where)
    except DataError as error:  # a SpecError, so that the loader points at the key's line
        raise SpecError(list(error.problems)) from error


def with_statements(dataset: Dataset, spec: Any, base_dir: Path | None) -> Dataset:
    """``dataset`` carrying the statements of ``spec.evaluate.statements`` (unchanged when
    the spec has none).

    Raises:
        SpecError: as :func:`statement_sets`.
    """
    settings = spec.evaluate.statements
    if settings is None:
        return dataset
    return replace(dataset, statements=statement_sets(settings, base_dir))


def statements_digest(dataset: Dataset) -> str | None:
    """SHA-256 of the statements the data carry (None without any)."""
    if dataset.statements is None:
        return None
    return hashlib.sha256(json.dumps(dataset.statements).encode()).hexdigest()


def statement_encoder(spec: Any, base_dir: Path | None, statements: list[str]) -> Any:
    """Text to token ids as ``data.tokenizer`` encodes the training documents: every
    statement's context and word encoded once (one call of
    :func:`bayesflow.data.text.encode_documents`), then looked up."""
    from bayesflow.data.text import encode_documents

    pieces = sorted({part for text in statements for part in split_statement(text)})
    encoded, _ = encode_documents(pieces, spec.data, spec.model.model_dump(), base_dir)
    table = dict(zip(pieces, encoded))
    return table.__getitem__


def check_statement_lengths(dataset: Dataset, spec: Any, base_dir: Path | None, context: int) -> None:
    """Every statement the data carry fits the model's context: its context and word, in
    the tokens the evaluation scores them in, are at most ``context`` tokens.

    Raises:
        SpecError: the first statement that does not fit, naming its file and line (a
            cipher's statement: the line of the statement it enciphers), its length and
            the context.
    """
    settings = spec.evaluate.statements
    if settings is None or dataset.statements is None:
        return
    encoder = statement_encoder(spec, base_dir, [text for group in dataset.statements for text in group])
    sources = [(f"{KEY}.in_distribution", settings.in_distribution)]
    sources += [(_ood_key(settings, name), source) for name, source in settings.ood_sets()]
    for (key, source), group in zip(sources, dataset.statements):
        for index, statement in enumerate(group):
            tokens = sum(len(encoder(piece)) for piece in split_statement(statement))
            if tokens > context:
                raise SpecError(_too_long(settings, key, source, index, tokens, context, spec.data.tokenizer,
                                          base_dir))


def _too_long(settings: Any, key: str, source: str, index: int, tokens: int, context: int, tokenizer: str,
              base_dir: Path | None) -> str:
    ciphered = source == CIPHER and key != f"{KEY}.in_distribution"
    path = resolve_path(settings.in_distribution if ciphered else source, base_dir)
    line = numbered_statements(path, key)[index][0]
    place = (f"the cipher of {str(path)!r} line {line}" if ciphered else f"{str(path)!r} line {line}")
    unit = "byte tokens (UTF-8 bytes)" if tokenizer == "bytes" else "tokens of the model folder's tokenizer"
    return (f"{key}: {place} is a statement of {tokens} {unit}, but the model's context is {context} "
            f"tokens: the evaluation could not read it; shorten it to at most {context} tokens (or "
            "remove it), or use a model with a longer context")
