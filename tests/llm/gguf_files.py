"""Tiny GGUF files written by the tests with the `gguf` package's writer, as llama.cpp's
``convert_hf_to_gguf.py`` writes a Llama: its tensor names, q/k rows permuted for llama.cpp's
rotary layout, and a byte-level BPE tokenizer (the 256 byte symbols and two merges)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

HEADS = 2
# A byte-level vocabulary: the 256 byte symbols, then two merged tokens.
MERGES = ["h e", "Ġ t"]
VOCABULARY = 256 + len(MERGES)


def tiny_llama(hidden: int = 32, seed: int = 0, tied: bool = False) -> Any:
    """A config-built Llama of a few thousand parameters (rows of 32 for Q8_0 blocks);
    ``tied``: its output layer is its embedding (as SmolLM2's)."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCABULARY, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        max_position_embeddings=64, tie_word_embeddings=tied,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.AutoModelForCausalLM.from_config(config).eval()


def _llama_cpp_rows(weight: np.ndarray) -> np.ndarray:
    """The q/k permutation of llama.cpp's converter (transformers' GGUF loader undoes it)."""
    return (weight.reshape(HEADS, 2, weight.shape[0] // HEADS // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def byte_symbols() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()
    return [alphabet[byte] for byte in range(256)]


def write_gguf(model: Any, path: Path, quantization: str = "F32", architecture: str = "llama") -> Path:
    """``model`` (a Llama) as the GGUF file ``path``; matrices in ``quantization``
    (F32, F16 or Q8_0), norms in F32 as llama.cpp keeps them."""
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(byte_symbols() + [merge.replace(" ", "") for merge in MERGES])
    writer.add_token_types([1] * VOCABULARY)
    writer.add_token_merges(MERGES)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    kind = gguf.GGMLQuantizationType[quantization]
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp writes no `output.weight` for a tied model
        values = tensor.numpy().astype(np.float32)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            values = _llama_cpp_rows(values)
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if values.ndim == 1 or kind == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(target, values)
        else:
            writer.add_tensor(target, gguf.quants.quantize(values, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_wheel(gguf_file: Path, path: Path, member: str) -> Path:
    """A wheel-shaped zip holding ``gguf_file`` as ``member`` (what the pinned wheel holds)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(gguf_file, member)
        archive.writestr("package-0.0.0.dist-info/METADATA", "Name: package\n")
    return path
