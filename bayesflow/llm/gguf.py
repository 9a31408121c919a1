"""GGUF files (llama.cpp's format), read and converted once into an ordinary model folder.

transformers reads a GGUF file itself (``from_pretrained(folder, gguf_file=name)``: the
config and tokenizer from its metadata, every tensor dequantized to float32), but it cannot
``save_pretrained`` a model so loaded. :func:`convert_gguf` loads the file that way, moves
its state dict into a model built from the same config (no quantization left) and saves
that, with the tokenizer, as a folder :func:`bayesflow.llm.source.build_base_model` reads
like any other (SmolLM2-135M: 35 s and 1.2 GB peak RSS on a 2-core CPU, 538 MB of float32
weights).

:func:`check_gguf` reads only the header (a memory map; no tensor is dequantized) and
refuses, before any conversion: a file that is not GGUF, one whose tensors end past the end
of the file (truncated), an architecture transformers cannot read from GGUF, a tensor type
``gguf`` cannot dequantize. The ``gguf`` package is part of the ``llm`` extra.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bayesflow.errors import ModelSourceError

__all__ = ["GgufSummary", "check_gguf", "convert_gguf", "require_gguf", "supported_architectures",
           "supported_quantizations"]

# transformers' GGUF architectures that are not causal language models (encoders, seq2seq),
# and the two metadata sections its table also lists.
_NOT_CAUSAL = frozenset({"general", "tokenizer", "t5", "umt5"})
# llama.cpp's names of architectures transformers files under another name (as its
# `load_gguf_checkpoint` renames them).
_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss",
            "minimax-m2": "minimax_m2"}


@dataclass(frozen=True)
class GgufSummary:
    """What a GGUF file's header says."""

    path: Path
    architecture: str
    name: str | None
    quantizations: tuple[str, ...]  # tensor types, most frequent first
    parameters: int


def require_gguf() -> ModuleType:
    """The ``gguf`` package, or a :class:`ModelSourceError` naming the install command."""
    from bayesflow.llm.extra import INSTALL

    try:
        import gguf
    except ImportError as error:
        raise ModelSourceError(
            f"reading a GGUF file needs the `gguf` package, part of the optional `llm` extra; "
            f"install it with `{INSTALL}` (or `pip install gguf`)"
        ) from error
    return gguf


def supported_architectures() -> list[str]:
    """The GGUF architectures transformers reads as causal language models."""
    from bayesflow.llm.extra import require

    require("transformers")
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - _NOT_CAUSAL)


def supported_quantizations() -> list[str]:
    """The tensor types ``gguf`` dequantizes (what transformers calls to read a tensor)."""
    gguf = require_gguf()
    from gguf import quants

    # a type gguf can only write (no `dequantize_blocks` of its own) is left out
    names = {"F32", "F16"} | {gguf.GGMLQuantizationType(kind).name
                              for kind, traits in quants._type_traits.items()
                              if "dequantize_blocks" in traits.__dict__}
    return sorted(names)


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode("utf-8", "replace") if field.types and field.types[0].name == "STRING" else value[0]


def _open(path: Path) -> Any:
    """A ``GGUFReader`` of ``path``, or a :class:`ModelSourceError` saying why not."""
    gguf = require_gguf()
    if not path.is_file():
        raise ModelSourceError(f"{str(path)!r}: no such file")
    size = path.stat().st_size
    with path.open("rb") as stream:
        magic = stream.read(4)
    if magic != b"GGUF":
        raise ModelSourceError(
            f"{str(path)!r} ({size:,} bytes) is not a GGUF file: it starts with {magic!r}, a GGUF "
            "file with b'GGUF' (llama.cpp's format); name a .gguf file, or the model folder "
            "(config.json, weights, tokenizer)"
        )
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OSError, EOFError) as error:
        raise ModelSourceError(
            f"{str(path)!r} ({size:,} bytes) is truncated or damaged: its GGUF header cannot be "
            f"read whole ({error}); download or copy it again"
        ) from error


def check_gguf(path: Path) -> GgufSummary:
    """The header of the GGUF file ``path``, refused unless transformers can load all of it.

    Raises:
        ModelSourceError: not GGUF, truncated, an architecture or tensor type transformers
            cannot read, or the ``gguf`` package missing.
    """
    reader = _open(path)
    size = path.stat().st_size
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size or not reader.tensors:
        raise ModelSourceError(
            f"{str(path)!r} is truncated: its tensors end at byte {end:,} but the file has "
            f"{size:,} bytes; download or copy it again"
            if reader.tensors else f"{str(path)!r} holds no tensors; it is not a model"
        )
    architecture = str(_field(reader, "general.architecture") or "")
    known = supported_architectures()
    if _ALIASES.get(architecture, architecture) not in known:
        raise ModelSourceError(
            f"{str(path)!r}: transformers cannot read a {architecture or 'unnamed'!r} model from "
            f"GGUF; it reads these architectures: {', '.join(known)}"
        )
    counts: dict[str, int] = {}
    for tensor in reader.tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    readable = supported_quantizations()
    unreadable = sorted(set(counts) - set(readable))
    if unreadable:
        raise ModelSourceError(
            f"{str(path)!r}: tensors of type {', '.join(unreadable)} cannot be dequantized by the "
            f"`gguf` package (it reads {', '.join(readable)}); use a file quantized to one of those"
        )
    parameters = sum(int(tensor.n_elements) for tensor in reader.tensors)
    name = _field(reader, "general.name")
    ordered = tuple(sorted(counts, key=lambda kind: -counts[kind]))
    return GgufSummary(path, architecture, None if name is None else str(name), ordered, parameters)


def _unquantized(transformers: Any, torch: Any, loaded: Any, config: Any) -> Any:
    """The GGUF-loaded model as a plain one that ``save_pretrained`` accepts, sharing its
    tensors: built on the meta device (no memory, no random initialisation), the loaded
    tensors assigned in (SmolLM2: 1.2 GB peak instead of 1.7 GB with a second copy)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    for name, buffer in loaded.named_buffers():  # non-persistent ones (rotary frequencies)
        owner, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, buffer)
    model.tie_weights()
    left = [name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
    if left:
        raise ModelSourceError(f"the GGUF file gave no values for {', '.join(left[:5])}")
    return model.eval()


def convert_gguf(path: Path, folder: Path) -> dict[str, Any]:
    """Write the model of the GGUF file ``path`` into the empty folder ``folder``: its
    ``config.json``, ``model.safetensors`` (float32) and tokenizer files.

    Returns:
        ``architecture``, ``parameters`` and ``seconds`` of the conversion.

    Raises:
        ModelSourceError: the file is refused by :func:`check_gguf`, or transformers fails
            to read it.
    """
    from bayesflow.llm.extra import require

    summary = check_gguf(path)
    torch = require("torch")
    transformers = require("transformers")
    started = time.perf_counter()
    where = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name}
    try:
        loaded = transformers.AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(**where)
    except (ValueError, KeyError, NotImplementedError, RuntimeError) as error:
        raise ModelSourceError(
            f"{str(path)!r}: transformers could not read this {summary.architecture!r} GGUF file "
            f"({type(error).__name__}: {error})"
        ) from error
    config = loaded.config
    for key in ("quantization_config", "_model_name_or_path"):  # nothing of the GGUF load stays
        config.__dict__.pop(key, None)
    model = _unquantized(transformers, torch, loaded, config)
    del loaded
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    parameters = sum(parameter.numel() for parameter in model.parameters())
    return {"architecture": summary.architecture, "parameters": int(parameters),
            "quantizations": list(summary.quantizations),
            "seconds": round(time.perf_counter() - started, 1)}
