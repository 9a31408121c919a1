"""Where a causal language model comes from: a config, a local folder; its errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from bayesflow.errors import SpecError
from bayesflow.llm import build_causal_lm, shared_causal_lm
from bayesflow.llm.source import build_base_model
from bayesflow.spec.llm import CausalLMSpec
from tests.llm.conftest import tiny


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_config_built_model_is_tiny_eager_and_frozen(family: str) -> None:
    model = build_base_model(CausalLMSpec.model_validate(tiny(family)))
    count = sum(p.numel() for p in model.parameters())
    assert 5_000 < count <= 50_000
    assert model.config._attn_implementation == "eager"
    assert not any(p.requires_grad for p in model.parameters())
    assert not model.training
    logits = model(torch.randint(0, 256, (2, 9)), use_cache=False).logits
    assert logits.shape == (2, 9, 256)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dtype_of_the_frozen_weights(dtype: str) -> None:
    model = build_base_model(CausalLMSpec.model_validate(tiny(dtype=dtype)))
    assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}


def test_sdpa_attention_is_refused_with_the_reason() -> None:
    with pytest.raises(SpecError, match="attention 'sdpa' cannot run chains: only `eager` batches"):
        build_causal_lm(tiny(attention="sdpa"))
    assert "SDPA path fails" in (CausalLMSpec.model_fields["attention"].description or "")


def test_local_folder_loads_the_saved_weights(tmp_path) -> None:
    spec = CausalLMSpec.model_validate(tiny())
    saved = build_base_model(spec)
    saved.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "tokenizer_config.json").write_text("{}")
    loaded, names = build_causal_lm(
        {**tiny(family=None, path="m"), "trainable": {"parameters": ["model.norm.*"]}}, tmp_path
    )
    assert names == ("model.norm.weight",)
    assert loaded.config._attn_implementation == "eager"
    for (name, a), (_, b) in zip(saved.named_parameters(), loaded.named_parameters()):
        assert torch.equal(a, b), name


def test_folder_errors_name_what_is_missing(tmp_path) -> None:
    config = tiny(family=None, path=str(tmp_path / "absent"))
    with pytest.raises(SpecError, match="no folder .*absent.*nothing is downloaded"):
        build_causal_lm(config)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(SpecError, match="lacks weights and a tokenizer.*it holds: config.json"):
        build_causal_lm({**config, "path": str(folder)})
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(SpecError, match=r"lacks a tokenizer \("):
        build_causal_lm({**config, "path": str(folder)})


def test_package_folder_resolves_under_the_shipped_files() -> None:
    """`package:NAME` is a folder of bayesflow/data/files, whatever the spec's folder."""
    from bayesflow.llm.source import check_folder

    with pytest.raises(SpecError, match=r"no folder .*bayesflow/data/files/lm/no_such_model"):
        check_folder("package:lm/no_such_model", Path("/elsewhere"))


def test_spec_refuses_two_sources_and_bad_heads() -> None:
    with pytest.raises(SpecError, match="exactly one of `family`"):
        build_causal_lm(tiny(path="somewhere"))
    with pytest.raises(SpecError, match="heads"):
        build_causal_lm(tiny(heads=3))
    with pytest.raises(SpecError, match="exactly one of `lora` or `parameters`"):
        build_causal_lm(tiny(trainable={}))


def test_missing_extra_names_the_install_command(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    with pytest.raises(SpecError, match=r"pip install 'bayesflow-workflows\[llm\]'"):
        build_causal_lm(tiny())


def test_config_weights_follow_the_spec_seed_not_the_global_one() -> None:
    torch.manual_seed(1)
    first = build_base_model(CausalLMSpec.model_validate(tiny()))
    torch.manual_seed(2)
    again = build_base_model(CausalLMSpec.model_validate(tiny()))
    other = build_base_model(CausalLMSpec.model_validate(tiny(seed=1)))
    pairs = list(zip(first.parameters(), again.parameters(), other.parameters()))
    assert all(torch.equal(a, b) for a, b, _ in pairs)
    assert not all(torch.equal(a, c) for a, _, c in pairs)


def test_shared_model_is_built_once_per_settings() -> None:
    model, names = shared_causal_lm(tiny(seed=11))
    assert shared_causal_lm(CausalLMSpec.model_validate(tiny(seed=11))) == (model, names)
    assert shared_causal_lm(tiny(seed=12))[0] is not model


def test_importing_the_package_loads_neither_torch_nor_the_extra() -> None:
    import subprocess

    code = ("import sys, bayesflow.llm, bayesflow.spec.llm; "
            "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_folder_models_dump_leaves_out_the_sizes_it_does_not_read() -> None:
    """The resolved spec of a `path` model shows no config-built sizes (its own are in its
    config.json); a config-built model's dump keeps every size."""
    from bayesflow.spec.llm import SIZES, CausalLMSpec

    trainable = {"parameters": ["model.norm.*"]}
    folder = CausalLMSpec.model_validate({"name": "causal_lm", "path": "m", "trainable": trainable})
    built = CausalLMSpec.model_validate({"name": "causal_lm", "family": "llama", "trainable": trainable})
    assert not set(SIZES) & set(folder.model_dump(mode="json"))
    assert set(SIZES) <= set(built.model_dump(mode="json"))
    assert CausalLMSpec.model_validate(folder.model_dump(mode="json")) == folder  # it round-trips
