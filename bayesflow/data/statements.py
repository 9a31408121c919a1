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
from bayesflow.llm.statements import cipher, read_statements
from bayesflow.spec.statements import CIPHER

__all__ = ["KEY", "statement_sets", "statements_digest", "with_statements"]

KEY = "evaluate.statements"


def statement_sets(settings: Any, base_dir: Path | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The in-distribution statements of ``settings`` (a ``StatementsSpec``) and the
    out-of-distribution ones: their cipher, or a file's.

    Raises:
        SpecError: a file is missing, empty, not UTF-8 or holds a line without a word to
            score, naming the key (``evaluate.statements.in_distribution`` or ``.ood``).
    """
    inside = _read(settings.in_distribution, f"{KEY}.in_distribution", base_dir)
    if settings.ood == CIPHER:
        outside = cipher(inside, settings.cipher_seed)
    else:
        outside = _read(settings.ood, f"{KEY}.ood", base_dir)
    return tuple(inside), tuple(outside)


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
