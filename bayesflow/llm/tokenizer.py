"""The model folder's own tokenizer (``data.tokenizer: model``), and the Hugging Face
tokenizer whose ids are UTF-8 bytes that the shipped checkpoint carries.

A folder's tokenizer is loaded with transformers' ``AutoTokenizer`` and
``local_files_only=True`` (nothing is fetched), lazily: transformers is the optional
``llm`` extra. Text is encoded as the model reads it in training: no special tokens are
added (a BOS a tokenizer would prepend to every document is not part of the windows).

:func:`save_byte_tokenizer` writes a real ``tokenizer.json`` (a byte-level BPE with the
256 byte symbols and no merges) whose id of every byte is its value, so that on a model
trained on bytes ``tokenizer: model`` and ``tokenizer: bytes`` give the same ids.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.errors import SpecError
from bayesflow.llm.extra import require

__all__ = ["folder_encoder", "folder_vocabulary", "load_folder_tokenizer", "save_byte_tokenizer"]


def folder_encoder(path: Path, where: str = "data.tokenizer") -> Callable[[str], np.ndarray]:
    """A function from text to the token ids (int64) of the folder's tokenizer, no special
    tokens added.

    Raises:
        SpecError: the ``llm`` extra is missing, or the folder has no tokenizer that loads
            offline (the message names ``where`` and the folder).
    """
    tokenizer = load_folder_tokenizer(path, where)

    def encode(text: str) -> np.ndarray:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return np.asarray(ids, dtype=np.int64).reshape(-1)

    return encode


def folder_vocabulary(path: Path, where: str = "data.tokenizer") -> int:
    """The number of token ids of the folder's tokenizer (its added tokens included).

    Raises:
        SpecError: as :func:`folder_encoder`.
    """
    return len(load_folder_tokenizer(path, where))


def load_folder_tokenizer(path: Path, where: str = "data.tokenizer") -> Any:
    """The folder's tokenizer, loaded once per folder in a process.

    Raises:
        SpecError: as :func:`folder_encoder`.
    """
    require("transformers", where=where)
    folder = str(Path(path).expanduser().resolve())
    if not Path(folder).is_dir():
        raise SpecError(f"{where}: no model folder {folder!r} to read a tokenizer from")
    try:
        return _load(folder)
    except Exception as error:  # transformers and tokenizers raise many kinds here
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise SpecError(
            f"{where}: the model folder {folder!r} has no tokenizer that transformers loads "
            f"offline ({type(error).__name__}: {reason}); use `tokenizer: bytes`, or save one "
            "there with the tokenizer's `save_pretrained`"
        ) from error


@lru_cache(maxsize=8)
def _load(folder: str) -> Any:
    transformers = require("transformers")
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)


def save_byte_tokenizer(folder: Path) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``: a byte-level
    BPE over the 256 byte symbols, without merges or special tokens, so the id of every
    token is the value of its UTF-8 byte."""
    transformers = require("transformers", where="tokenizer")
    tokenizers = require("tokenizers", where="tokenizer")
    symbols = tokenizers.pre_tokenizers.ByteLevel.alphabet()  # one printable symbol per byte
    by_byte = _byte_symbols()
    if set(by_byte) != set(symbols):
        raise RuntimeError("tokenizers' byte alphabet is not the GPT-2 byte map")
    vocabulary = {symbol: value for value, symbol in enumerate(by_byte)}
    model = tokenizers.models.BPE(vocab=vocabulary, merges=[])
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, clean_up_tokenization_spaces=False)
    fast.save_pretrained(str(folder))


def _byte_symbols() -> list[str]:
    """The printable character GPT-2's byte-level map gives each byte 0–255, in byte order:
    printable Latin-1 bytes stand for themselves, the others for 256 + their rank."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = [], 0
    for value in range(256):
        if value in kept:
            symbols.append(chr(value))
        else:
            symbols.append(chr(256 + extra))
            extra += 1
    return symbols
