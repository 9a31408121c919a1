"""A model folder's weights as their safetensors headers describe them, read without
loading a tensor.

A ``.safetensors`` file is 8 bytes (the little-endian length N of a JSON header), the
header (every tensor's ``dtype``, ``shape`` and ``data_offsets``, begin and end in the
data that follows) and the data, which the offsets must cover exactly. Reading the header
costs the same for a tiny model and for an 8B one, so ``bayesflow validate`` checks that
every weights file is whole (:func:`folder_tensors`) and matches the model its config
builds (:mod:`bayesflow.llm.checks`), where the run would fail on transformers' message
naming no file, or load a model part of which is random.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

from bayesflow.errors import SpecError

__all__ = ["SINGLE", "SHARDED", "Tensor", "check_tensors", "folder_tensors", "read_header"]

SINGLE = "model.safetensors"
SHARDED = "model.safetensors.index.json"
# Bytes per element of safetensors' dtypes (the packed sub-byte ones are left unchecked).
_ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
# safetensors refuses a longer header (its MAX_HEADER_SIZE).
_MAX_HEADER = 100_000_000
_FIX = "save the model again with `save_pretrained` (or copy the file again: it may be truncated)"


class Tensor(NamedTuple):
    """One tensor of a weights file: its dtype, its shape and the file holding it."""

    dtype: str
    shape: tuple[int, ...]
    file: str


def read_header(file: Path, where: str = "model.path") -> dict[str, Tensor]:
    """The tensors of a ``.safetensors`` file by name, checked to be covered by its data.

    Raises:
        SpecError: the file is shorter than its header says, its header is not JSON
            describing tensors, or its tensors do not fill its data exactly.
    """
    size = file.stat().st_size
    with file.open("rb") as stream:
        head = stream.read(8)
        if len(head) < 8:
            raise SpecError(f"{where}: weights file {str(file)!r} has {size} bytes, not even the 8 of a "
                            f"safetensors header's length; {_FIX}")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, _MAX_HEADER):
            raise SpecError(f"{where}: weights file {str(file)!r} announces a header of {length} bytes but "
                            f"holds {size} bytes in all; {_FIX}")
        raw = stream.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        raise SpecError(f"{where}: weights file {str(file)!r} has no readable safetensors header "
                        f"({error}); {_FIX}") from None
    if not isinstance(header, dict):
        raise SpecError(f"{where}: weights file {str(file)!r}: its header is not a JSON object; {_FIX}")
    tensors, extent = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = str(entry["dtype"]), tuple(int(side) for side in entry["shape"])
            begin, end = (int(offset) for offset in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"{where}: weights file {str(file)!r}: the header's entry for tensor {name!r} "
                            f"lacks a dtype, shape or data_offsets ({entry!r}); {_FIX}") from None
        width = _ITEM_BYTES.get(dtype)
        if end < begin or (width is not None and end - begin != width * math.prod(shape)):
            raise SpecError(f"{where}: weights file {str(file)!r}: tensor {name!r} ({dtype}, shape "
                            f"{list(shape)}) spans bytes {begin}-{end}, which do not hold that shape; {_FIX}")
        tensors[name] = Tensor(dtype, shape, file.name)
        extent = max(extent, end)
    data = size - 8 - length
    if data != extent:
        raise SpecError(
            f"{where}: weights file {str(file)!r} holds {data} bytes of tensor data, but its header's "
            f"{len(tensors)} tensors need {extent} ({'truncated' if data < extent else 'trailing bytes'}); "
            f"{_FIX}"
        )
    return tensors


def folder_tensors(folder: Path, where: str = "model.path") -> dict[str, Tensor] | None:
    """Every tensor of the folder's safetensors weights (one file, or the shards its index
    names), each file's header checked; None for weights in another format
    (``pytorch_model.bin`` is a pickle: not read before the run).

    Raises:
        SpecError: a file is not whole, or the index is unreadable or names a missing shard.
    """
    if (folder / SINGLE).is_file():
        return read_header(folder / SINGLE, where)
    index = folder / SHARDED
    if not index.is_file():
        return None
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise SpecError(f"{where}: {str(index)!r} is not a safetensors index with a weight_map "
                        f"({error!r}); {_FIX}") from None
    absent = [shard for shard in shards if not (folder / shard).is_file()]
    if absent:
        raise SpecError(f"{where}: {str(index)!r} names shard(s) {', '.join(absent[:3])} that "
                        f"{str(folder)!r} lacks; copy every shard the index names into the folder")
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        tensors.update(read_header(folder / shard, where))
    return tensors


def check_tensors(model: Any, tensors: dict[str, Tensor], folder: Path, where: str = "model.path") -> None:
    """The weights hold exactly the tensors of ``model`` (built from the folder's config, on
    the meta device), each of its shape, as transformers would load them: a checkpoint's
    names renamed its way (a base-model prefix added or stripped, legacy names), a tied
    tensor (``lm_head.weight`` tied to the embedding) present under either name, the names
    the model class says to ignore ignored.

    Raises:
        SpecError: a tensor of the model is missing (it would be initialised at random and
            frozen), a tensor of the file is not the model's, or a shape differs; naming the
            folder and the first few tensors.
    """
    state = model.state_dict(keep_vars=True)
    expected = {name: tuple(value.shape) for name, value in state.items()}
    aliases: dict[int, list[str]] = {}  # a tied tensor's names
    for name, value in state.items():
        aliases.setdefault(id(value), []).append(name)
    renamed, converted = _renamed(model, list(tensors), expected)
    present = set(renamed.values())
    ignore_missing, ignore_unexpected = _ignored(model)
    missing = [name for name in expected if name not in present and not ignore_missing(name)
               and not any(alias in present for alias in aliases[id(state[name])])]
    unexpected = [original for original, name in renamed.items()
                  if name not in expected and not ignore_unexpected(original)]
    mismatched = [f"{original} {list(tensors[original].shape)} in {tensors[original].file}, "
                  f"{list(expected[name])} in the model"
                  for original, name in renamed.items()
                  if name in expected and original not in converted and tensors[original].shape != expected[name]]
    problems = [f"{what} {_first_few(names)}" for what, names in (
        ("the weights lack tensors the config's model has (transformers would initialise them at random, "
         "and they would stay frozen):", missing),
        ("the weights hold tensors the config's model does not have:", unexpected),
        ("shapes differ:", mismatched)) if names]
    if problems:
        raise SpecError(
            f"{where}: the weights in {str(folder)!r} do not match the model its config.json builds: "
            + "; ".join(problems)
            + "; use the config.json saved with these weights (`save_pretrained` writes both)"
        )


def _first_few(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _renamed(model: Any, names: list[str], expected: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    """Each checkpoint name as the model's (transformers' own renaming where it has one, else
    the base-model prefix added or stripped) and the names a converter merges (their shapes
    are the converter's business)."""
    prefix = getattr(model, "base_model_prefix", "") or ""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

        mapping = get_model_conversion_mapping(model)
        renamings = [entry for entry in mapping if isinstance(entry, WeightRenaming)]
        converters = [entry for entry in mapping if isinstance(entry, WeightConverter)]
    except Exception:  # noqa: BLE001 - another transformers: the prefix rule alone
        renamed = {name: _with_prefix(name, prefix, expected) for name in names}
        return renamed, set()
    renamed, converted = {}, set()
    for name in names:
        key, source = rename_source_key(name, renamings, converters, prefix or None, expected)
        if key not in expected and name in expected:  # as transformers' loader: no renaming
            key, source = rename_source_key(name, [], [], prefix or None, expected)
        renamed[name] = key
        if source is not None:
            converted.add(name)
    return renamed, converted


def _with_prefix(name: str, prefix: str, expected: dict[str, Any]) -> str:
    if name in expected or not prefix:
        return name
    if name.startswith(prefix + ".") and name[len(prefix) + 1:] in expected:
        return name[len(prefix) + 1:]
    return f"{prefix}.{name}" if f"{prefix}.{name}" in expected else name


def _ignored(model: Any) -> tuple[Any, Any]:
    """Tests of the names transformers does not report missing or unexpected for this model
    (its class's patterns; per-layer rotary ``inv_freq`` and ``position_ids`` buffers of old
    checkpoints)."""
    buffers = [name for name, _ in model.named_buffers()]
    unexpected = set(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    if any(name.endswith("rotary_emb.inv_freq") for name in buffers):
        unexpected.add(r"rotary_emb\.inv_freq")
    if any(name.endswith("position_ids") for name in buffers):
        unexpected.add(r"(^|\.)position_ids$")
    missing = set(getattr(model, "_keys_to_ignore_on_load_missing", None) or ())

    def test(patterns: set[str]) -> Any:
        if not patterns:
            return lambda name: False
        pattern = re.compile("|".join(f"({item})" for item in sorted(patterns)))
        return lambda name: pattern.search(name) is not None

    return test(missing), test(unexpected)
