"""``text``: documents cut into token windows for a causal language model (torch-free).

The documents come from a CSV column or text files (:mod:`bayesflow.llm.text` reads them),
are tokenised one by one (:func:`encode_documents`: UTF-8 bytes, or the model folder's
tokenizer) and cut into windows; each document's last ``test_fraction`` of tokens gives
its test windows and the ``validation_fraction`` before that its validation windows
(:func:`bayesflow.llm.text.document_parts`), so no token is both trained on and held out.
Inputs are the windows (n, length), targets their last ``scored`` tokens (n, scored); the
number of classes is the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.data.dataset import DATASETS, Dataset, resolve_path
from bayesflow.errors import DataError, SpecError
from bayesflow.llm.text import (
    BYTE_VOCABULARY,
    byte_encode,
    check_sizes,
    document_parts,
    encoded_episodes,
    read_csv_column,
    read_text_files,
)
from bayesflow.spec.text import TextSpec

__all__ = ["encode_documents", "read_documents", "text", "text_encoder", "text_files"]


def text_files(files: list[str], base_dir: Path | None) -> tuple[list[Path], list[str]]:
    """The files ``data.files`` names (a folder: its ``*.txt`` in name order) and the spec
    key of each (``data.files.<i>``).

    Raises:
        DataError: an entry that is neither a file nor a folder, or a folder without ``*.txt``.
    """
    paths: list[Path] = []
    keys: list[str] = []
    for index, entry in enumerate(files):
        where = f"data.files.{index}"
        path = resolve_path(entry, base_dir)
        if path.is_dir():
            found = sorted(path.glob("*.txt"))
            if not found:
                raise DataError(f"{where}: folder {str(path)!r} holds no *.txt files", "data.files")
            paths += found
            keys += [where] * len(found)
        elif path.is_file():
            paths.append(path)
            keys.append(where)
        else:
            raise DataError(f"{where}: no file or folder {str(path)!r}; check the path", "data.files")
    return paths, keys


def read_documents(spec: TextSpec, base_dir: Path | None) -> list[str]:
    """The documents of ``spec`` (at most ``max_documents``), in order."""
    if spec.csv is not None:
        assert spec.column is not None
        documents = read_csv_column(resolve_path(spec.csv, base_dir), spec.column, "data")
    else:
        assert spec.files is not None
        paths, keys = text_files(spec.files, base_dir)
        if spec.max_documents is not None:
            paths, keys = paths[: spec.max_documents], keys[: spec.max_documents]
        documents = read_text_files(paths, keys)
    if not documents:
        raise DataError(f"data.column: no non-empty value in column {spec.column!r}", "data.csv")
    return documents[: spec.max_documents] if spec.max_documents is not None else documents


def encode_documents(
    documents: list[str], spec: TextSpec, model: dict[str, Any] | None, base_dir: Path | None
) -> tuple[list[np.ndarray], int]:
    """Each document as int64 token ids, and the vocabulary size: the single place where
    text becomes tokens.

    ``tokenizer: bytes`` gives UTF-8 bytes (256 ids); ``tokenizer: model`` the tokenizer
    of the model folder ``model.path`` (:mod:`bayesflow.llm.tokenizer`).

    Raises:
        SpecError: ``tokenizer: model`` without a model folder, or without the tokenizer
            module in this bayesflow.
    """
    encoder, vocabulary = text_encoder(spec.tokenizer, model, base_dir)
    return [encoder(document) for document in documents], vocabulary


def text_encoder(
    tokenizer: str, model: dict[str, Any] | None, base_dir: Path | None
) -> tuple[Callable[[str], np.ndarray], int]:
    """The function from a text to its int64 token ids and the vocabulary size of
    ``data.tokenizer`` (``bytes``, or ``model``: the model folder's tokenizer).

    Raises:
        SpecError: ``tokenizer: model`` without a model folder, or without the tokenizer
            module in this bayesflow.
    """
    if tokenizer == "bytes":
        return byte_encode, BYTE_VOCABULARY
    encoder, vocabulary = _folder_tokenizer(model, base_dir)
    return (lambda text: np.asarray(encoder(text), dtype=np.int64)), vocabulary


def _folder_tokenizer(model: dict[str, Any] | None, base_dir: Path | None) -> tuple[Callable[[str], Any], int]:
    path = (model or {}).get("path")
    if not isinstance(path, str):
        raise SpecError(
            "data.tokenizer: `model` reads the tokenizer of the model folder, but the model "
            "has no `path`; use `tokenizer: bytes` for a model built from a config"
        )
    try:
        from bayesflow.llm.tokenizer import (  # type: ignore[import-not-found,unused-ignore]
            folder_encoder,
            folder_vocabulary,
        )
    except ImportError as error:
        raise SpecError(
            "data.tokenizer: `model` (the model folder's tokenizer) is not yet available in "
            "this bayesflow; use `tokenizer: bytes`"
        ) from error
    from bayesflow.llm.source import check_folder

    folder = check_folder(path, base_dir)
    return folder_encoder(folder), int(folder_vocabulary(folder))


@DATASETS.register("text")
def text(base_dir: Path | None = None, model: dict[str, Any] | None = None, **options: Any) -> Dataset:
    """Token windows of a text corpus (see the module docstring); ``model`` is the spec's
    ``model`` section (its folder's tokenizer for ``tokenizer: model``)."""
    spec = TextSpec.model_validate({"name": "text", **options})
    check_sizes(spec.length, spec.step, spec.scored, "data")
    encoded, vocabulary = encode_documents(read_documents(spec, base_dir), spec, model, base_dir)
    source = spec.csv or "data.files"
    if spec.episodes:
        episodes = encoded_episodes(encoded, spec.length, spec.step, spec.scored, spec.test_fraction)
        return Dataset(
            episodes.x_train, episodes.y_train, episodes.x_test, episodes.y_test, "classification",
            vocabulary, episode_train=episodes.episode_train, episode_test=episodes.episode_test,
            source=source, target="the scored tokens",
        )
    parts: list[list[np.ndarray]] = [[], [], []]
    for ids in encoded:
        for bucket, windows in zip(parts, document_parts(
                ids, spec.length, spec.step, spec.test_fraction, spec.validation_fraction)):
            bucket.append(windows)
    train, validation, test = (np.concatenate(bucket) for bucket in parts)
    if not train.shape[0]:
        longest = max(ids.shape[0] for ids in encoded)
        raise DataError(
            f"data.length: no document gives a training window of {spec.length} tokens (the "
            f"longest has {longest} tokens, of which the first {1 - spec.test_fraction - spec.validation_fraction:.0%} "
            "train); use a shorter length or longer documents", source,
        )
    if spec.validation_fraction and not validation.shape[0]:
        raise DataError(
            f"data.validation_fraction: no document gives a validation window of {spec.length} "
            "tokens; raise validation_fraction, or use a shorter length", source,
        )
    if spec.test_fraction and not test.shape[0]:
        raise DataError(
            f"data.test_fraction: no document gives a test window of {spec.length} tokens; "
            "raise test_fraction, or use a shorter length", source,
        )
    scored = spec.length - spec.scored
    held = validation if spec.validation_fraction else None
    return Dataset(
        train, train[:, scored:].copy(), test, test[:, scored:].copy(), "classification", vocabulary,
        source=source, target="the scored tokens",
        x_validation=held, y_validation=None if held is None else held[:, scored:].copy(),
    )
