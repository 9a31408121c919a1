"""A tiny ``causal_lm`` workflow spec over a few short text files, for the spec tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# Three short documents of distinct letters, so a window's document can be read off it.
DOCUMENTS = {
    "a.txt": "".join(chr(97 + i % 26) for i in range(300)),
    "b.txt": "The quick brown fox jumps over the lazy dog. " * 6,
    "c.txt": "0123456789" * 20,
}


def tiny_lm(**overrides: Any) -> dict[str, Any]:
    """The model section: a config-built Llama, hidden 32, 2 layers, vocabulary 256."""
    model: dict[str, Any] = {
        "name": "causal_lm", "family": "llama", "vocab_size": 256, "hidden_size": 32,
        "intermediate_size": 64, "layers": 2, "heads": 2, "context": 128,
        "trainable": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}},
    }
    model.update(overrides)
    return model


def lm_spec(folder: Path, **sections: Any) -> dict[str, Any]:
    """A spec mapping whose data are :data:`DOCUMENTS` written into ``folder``."""
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(text)
    spec: dict[str, Any] = {
        "name": "lm_tiny",
        "data": {"name": "text", "files": sorted(DOCUMENTS), "length": 32, "stride": 16, "scored": 8,
                 "test_fraction": 0.2},
        "model": tiny_lm(),
        "likelihood": {"name": "next_token"},
        "prior": {"name": "diag_normal", "variance": 1.0},
        "temperatures": [1.0],
        "seeds": [0],
        "methods": {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 1,
                            "batch_size": 8}},
        "evaluate": {"n_samples": 3},
        "plots": [],
        "report": {"enabled": False},
        "tracking": {"uri": "memory://"},
    }
    spec.update(sections)
    return spec


def save_weights(config: Any, folder: Path) -> None:
    """The config and the safetensors weights of the model it builds (random), into ``folder``."""
    import transformers

    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def write_spec(folder: Path, spec: dict[str, Any]) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
