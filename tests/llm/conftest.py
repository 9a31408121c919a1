"""Tiny config-built language models (tens of thousands of parameters, nothing downloaded)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")


def tiny(family: str = "llama", **overrides: Any) -> dict[str, Any]:
    """A ``causal_lm`` model section of a tiny model (≈ 30k parameters at vocab 256)."""
    config: dict[str, Any] = {
        "name": "causal_lm", "family": family, "vocab_size": 256, "hidden_size": 16,
        "intermediate_size": 32, "layers": 2, "heads": 2, "context": 64,
        "trainable": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"],
                               "layers": [-1]}},
    }
    if family == "gpt2":
        config["trainable"] = {"lora": {"r": 2, "alpha": 4, "target_modules": ["c_attn"],
                                        "layers": [-1]}}
    config.update(overrides)
    return config
