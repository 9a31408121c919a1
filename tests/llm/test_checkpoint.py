"""The small pretrained byte-level Llama bayesflow ships (bayesflow/data/files/lm/checkpoint/,
built by scripts/build_lm_checkpoint.py): it loads offline, its tokenizer's ids are the
bytes, and it knows its corpus (held-out IMDB reviews well below the uniform log 256)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bayesflow.data.dataset import resolve_path
from bayesflow.llm.source import build_base_model, check_folder
from bayesflow.llm.text import byte_encode, read_csv_column, read_text_files
from bayesflow.llm.tokenizer import folder_encoder, folder_vocabulary
from bayesflow.spec.llm import CausalLMSpec

FOLDER = resolve_path("package:lm/checkpoint")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    spec = CausalLMSpec.model_validate(
        {"name": "causal_lm", "path": str(FOLDER), "trainable": {"parameters": ["model.norm.*"]}}
    )
    return build_base_model(spec)


def nats_per_byte(model: torch.nn.Module, texts: list[str], length: int = 256) -> float:
    """Mean next-byte loss over non-overlapping windows of each text (the build script's)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = torch.from_numpy(byte_encode(text))
            for start in range(0, ids.numel() - 1, length):
                window = ids[start : start + length][None]
                if window.shape[1] < 2:
                    continue
                logits = model(input_ids=window).logits[0, :-1]
                total += float(torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="sum"))
                count += window.shape[1] - 1
    return total / count


def test_the_checkpoint_loads_offline_eager_and_frozen(model: torch.nn.Module) -> None:
    assert check_folder(str(FOLDER)) == FOLDER
    record = json.loads((FOLDER / "build.json").read_text(encoding="utf-8"))
    assert model.config._attn_implementation == "eager"
    assert model.config.vocab_size == 256 and model.config.max_position_embeddings >= 256
    assert sum(p.numel() for p in model.parameters()) == record["parameters"]
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    assert (FOLDER / "model.safetensors").stat().st_size <= 4 * 2**20


def test_its_tokenizer_gives_the_byte_ids() -> None:
    """`tokenizer: model` and `tokenizer: bytes` give the same ids on the shipped checkpoint."""
    encode = folder_encoder(FOLDER)
    assert folder_vocabulary(FOLDER) == 256
    texts = ["Crème brûlée für Jürgen 😀🐝, naïve café", "tab\tand\nnewline  ",
             *read_text_files(sorted(resolve_path("package:lm/corpus").glob("*.txt")))]
    for text in texts:
        np.testing.assert_array_equal(encode(text), byte_encode(text))


def test_the_base_model_knows_its_corpus(model: torch.nn.Module) -> None:
    """Held-out IMDB test reviews: far below the uniform log 256 (a random model gives
    about 5.5 nats per byte), and what the build recorded for them."""
    reviews = read_csv_column(resolve_path("package:imdb_test_subset.csv.gz"), "text")[:5]
    loss = nats_per_byte(model, reviews)
    assert loss < 3.0 < math.log(256)
    record = json.loads((FOLDER / "build.json").read_text(encoding="utf-8"))
    recorded = record["held_out_nats_per_byte"]["imdb_test_subset (first 200 reviews)"]
    assert loss == pytest.approx(recorded, abs=0.3)  # 5 of the 200 reviews it averaged
    assert record["final_training_loss_nats_per_byte"] < 3.0
