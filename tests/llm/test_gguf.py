"""GGUF files converted once into ordinary model folders, and every bad file refused."""

from __future__ import annotations

import errno
import shutil
import sys
from pathlib import Path

import pytest
import torch

from bayesflow.errors import ModelSourceError, SpecError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.gguf import check_gguf, convert_gguf
from bayesflow.llm.model_cache import cache_home, read_source
from tests.llm.gguf_files import VOCABULARY, gguf, tiny_llama, write_gguf
from tests.numerics import reordered

# Two models with equal weights may still take other kernels (a tensor's layout after the
# llama.cpp q/k permutation): their logits are compared at the rounding of reordered sums
# over the widest contraction (the MLP's), the weights themselves bit for bit.
LOGITS = reordered(torch.float32, 256, steps=8, scale=10.0)


def assert_same_weights(left: torch.nn.Module, right: torch.nn.Module) -> None:
    """Every tensor of ``right``'s state dict equals ``left``'s, value for value."""
    mine = left.state_dict()
    for name, value in right.state_dict().items():
        assert torch.equal(mine[name], value), name

SENTENCE = " the cat sat on the mat"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A model cache of this test's own."""
    monkeypatch.setenv("BAYESFLOW_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def model():
    """The tiny Llama the files are written from (eager attention, as bayesflow loads)."""
    built = tiny_llama()
    built.config._attn_implementation = "eager"
    return built


def section(path: Path | str) -> dict:
    return {"name": "causal_lm", "path": str(path), "trainable": {"parameters": ["model.norm.*"]}}


def logits(model, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens, use_cache=False).logits


@pytest.mark.parametrize("tied", [False, True])
def test_float32_file_converts_to_a_folder_with_the_same_logits(tied, tmp_path) -> None:
    """The converted folder's model holds the written model's weights, value for value, and
    computes its logits (an output layer of its own, or tied to the embedding)."""
    model = tiny_llama(tied=tied)
    model.config._attn_implementation = "eager"
    file = write_gguf(model, tmp_path / "tiny.gguf")
    converted, _ = build_causal_lm(section(file))
    tokens = torch.randint(0, VOCABULARY, (3, 11), generator=torch.Generator().manual_seed(0))
    assert_same_weights(converted, model)
    torch.testing.assert_close(logits(converted, tokens), logits(model, tokens), **LOGITS)
    assert sum(p.numel() for p in converted.parameters()) == sum(p.numel() for p in model.parameters())


def test_quantized_file_converts_to_what_transformers_reads_from_it(model, tmp_path) -> None:
    """A Q8_0 file's folder equals transformers' own GGUF load (the dequantized values)."""
    import transformers

    file = write_gguf(model, tmp_path / "tiny.Q8_0.gguf", "Q8_0")
    assert check_gguf(file).quantizations[0] == "Q8_0"
    direct = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=file.name, attn_implementation="eager").eval()
    converted, _ = build_causal_lm(section(file))
    tokens = torch.randint(0, VOCABULARY, (2, 9), generator=torch.Generator().manual_seed(1))
    assert_same_weights(converted, direct)
    torch.testing.assert_close(logits(converted, tokens), logits(direct, tokens), **LOGITS)
    quantized = (logits(converted, tokens) - logits(model, tokens)).abs().max()
    assert quantized > LOGITS["atol"]  # Q8_0 rounded the weights: not the float32 model


def test_folder_holds_config_weights_tokenizer_and_source(model, tmp_path, home) -> None:
    """The folder is ordinary (no quantization left) and source.json says where it came from."""
    import json

    file = write_gguf(model, tmp_path / "tiny.gguf")
    convert_gguf(file, tmp_path / "out")
    names = {item.name for item in (tmp_path / "out").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert "quantization_config" not in json.loads((tmp_path / "out" / "config.json").read_text())
    build_causal_lm(section(file))
    (folder,) = (home / "models" / "gguf").iterdir()
    source = read_source(folder)
    assert source is not None and source["gguf_file"] == str(file.resolve())
    assert len(source["sha256"]) == 64 and source["parameters"] > 1_000
    assert {"converted_at", "transformers", "architecture"} <= set(source)


def test_tokenizer_of_the_folder_is_the_files(model, tmp_path) -> None:
    """The byte-level BPE of the file, merges included, is the folder's tokenizer."""
    from bayesflow.llm.tokenizer import folder_encoder

    file = write_gguf(model, tmp_path / "tiny.gguf")
    build_causal_lm(section(file))
    (folder,) = (cache_home() / "gguf").iterdir()
    ids = folder_encoder(folder)(SENTENCE)
    assert ids[:2].tolist() == [VOCABULARY - 1, VOCABULARY - 2]  # "Ġt", "he": both merges
    assert len(ids) < len(SENTENCE.encode())


def test_second_use_reads_the_cache_and_a_changed_file_converts_again(model, tmp_path, monkeypatch) -> None:
    """A file is converted once; rewriting it (new size or time) converts it anew."""
    import bayesflow.llm.gguf as module

    file = write_gguf(model, tmp_path / "tiny.gguf")
    build_causal_lm(section(file))
    calls: list[Path] = []
    real = module.convert_gguf
    monkeypatch.setattr(module, "convert_gguf", lambda path, folder: calls.append(path) or real(path, folder))
    build_causal_lm(section(file))
    assert calls == []
    write_gguf(tiny_llama(seed=1), file)
    build_causal_lm(section(file))
    assert calls == [file.resolve()]
    assert len(list((cache_home() / "gguf").iterdir())) == 2


def test_folder_holding_one_gguf_file_and_relative_paths(model, tmp_path) -> None:
    """A llama.cpp-style folder with one GGUF file is that file; paths are relative to base_dir."""
    (tmp_path / "llama.cpp").mkdir()
    write_gguf(model, tmp_path / "llama.cpp" / "tiny.gguf")
    converted, _ = build_causal_lm(section("llama.cpp"), tmp_path)
    assert converted.config.vocab_size == VOCABULARY


def test_folder_with_two_gguf_files_names_them(model, tmp_path) -> None:
    write_gguf(model, tmp_path / "a.gguf")
    shutil.copy(tmp_path / "a.gguf", tmp_path / "b.gguf")
    with pytest.raises(SpecError, match=r"model.path: .* holds 2 GGUF files \(a.gguf, b.gguf\); name the one"):
        build_causal_lm(section(tmp_path))


def test_a_gguf_path_that_does_not_exist_says_so(tmp_path) -> None:
    with pytest.raises(SpecError, match=r"model.path: no GGUF file .*absent.gguf'; nothing is downloaded"):
        build_causal_lm(section(tmp_path / "absent.gguf"))


def test_a_file_that_is_not_gguf_is_refused(tmp_path, home) -> None:
    file = tmp_path / "model.gguf"
    file.write_bytes(b"PK\x03\x04 this is a zip, not a model" * 10)
    with pytest.raises(SpecError, match=r"model.path: .*model.gguf' \(310 bytes\) is not a GGUF "
                                        r"file: it starts with b'PK\\x03\\x04', a GGUF file with b'GGUF'"):
        build_causal_lm(section(file))
    assert not home.exists() or not any(home.rglob("*.safetensors"))


@pytest.mark.parametrize("cut", [1, 1_000, 100_000])
def test_a_truncated_file_is_refused_and_nothing_is_written(cut, model, tmp_path, home) -> None:
    """Cut in the last tensor, in the middle, or in the metadata: refused before converting."""
    file = write_gguf(model, tmp_path / "tiny.gguf")
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - cut])
    with pytest.raises(SpecError, match=rf"model.path: .*tiny.gguf' \({len(data) - cut:,} bytes\) is "
                                        r"truncated or damaged: .*; download or copy it again"
                                        rf"|model.path: .* is truncated: its tensors end at byte "
                                        rf"{len(data):,} but the file has {len(data) - cut:,} bytes"):
        build_causal_lm(section(file))
    assert not (home / "models" / "gguf").exists() or not any((home / "models" / "gguf").iterdir())


def test_an_architecture_transformers_cannot_read_names_those_it_can(model, tmp_path) -> None:
    file = write_gguf(model, tmp_path / "tiny.gguf", architecture="rwkv6")
    with pytest.raises(SpecError, match=r"model.path: .*cannot read a 'rwkv6' model from GGUF; it "
                                        r"reads these architectures: .*gpt2, .*llama, .*qwen2"):
        build_causal_lm(section(file))


def test_a_tensor_type_gguf_cannot_dequantize_is_refused(model, tmp_path) -> None:
    """A Q8_1 tensor (written by llama.cpp for activations, never dequantized by gguf)."""
    writer = gguf.GGUFWriter(str(tmp_path / "q81.gguf"), "llama")
    size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1][1]
    writer.add_tensor("token_embd.weight", torch.zeros(4, size, dtype=torch.uint8).numpy(),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SpecError, match=r"model.path: .*tensors of type Q8_1 cannot be dequantized "
                                        r"by the `gguf` package \(it reads .*Q4_1.*\)"):
        build_causal_lm(section(tmp_path / "q81.gguf"))


def test_the_gguf_package_missing_names_the_extra(model, tmp_path, monkeypatch) -> None:
    file = write_gguf(model, tmp_path / "tiny.gguf")
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(SpecError, match=r"model.path: reading a GGUF file needs the `gguf` package, "
                                        r"part of the optional `llm` extra; install it with "
                                        r"`pip install 'bayesflow-workflows\[llm\]'`"):
        build_causal_lm(section(file))


def test_a_read_only_cache_is_refused_with_the_fix(model, tmp_path, monkeypatch) -> None:
    """The cache folder cannot be made (a file in its way, as a read-only mount refuses)."""
    file = write_gguf(model, tmp_path / "tiny.gguf")
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("BAYESFLOW_HOME", str(tmp_path / "blocked"))
    with pytest.raises(SpecError, match=r"model.path: .*blocked/models/gguf' cannot be written "
                                        r"\(.*\); nothing was kept.*export BAYESFLOW_HOME="):
        build_causal_lm(section(file))


def test_a_full_disk_before_or_during_the_write_leaves_nothing(model, tmp_path, home, monkeypatch) -> None:
    """Too little room is refused before converting; a disk filling up mid-write leaves no folder."""
    import bayesflow.llm.gguf as module
    from bayesflow.llm import model_cache

    file = write_gguf(model, tmp_path / "tiny.gguf")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(model_cache.shutil, "disk_usage", lambda _: usage._replace(free=0))
    with pytest.raises(SpecError, match=r"model.path: the disk of .* is full \(1 MB are needed; "
                                        r"0 MB free\); nothing was kept"):
        build_causal_lm(section(file))
    monkeypatch.undo()
    monkeypatch.setenv("BAYESFLOW_HOME", str(home))

    def fills_up(path: Path, folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(module, "convert_gguf", fills_up)
    with pytest.raises(SpecError, match=r"the disk of .* is full .*No space left on device"):
        build_causal_lm(section(file))
    assert list((home / "models" / "gguf").iterdir()) == []


def test_check_gguf_raises_model_source_errors_outside_a_spec(tmp_path) -> None:
    """Outside a spec (the pull) the same problems are ModelSourceErrors, exit code 1."""
    with pytest.raises(ModelSourceError, match="no such file") as caught:
        check_gguf(tmp_path / "absent.gguf")
    assert caught.value.exit_code == 1
