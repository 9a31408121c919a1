"""A causal language model as a spec's model: the ``text`` data block and its loader, and
the problem a workflow's stages build from it."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.dag.plan import Stage
from bayesflow.data import load_dataset
from bayesflow.stages.context import WorkflowContext
from bayesflow.variants import load_data
from tests.llm.spec_helpers import DOCUMENTS, lm_spec, save_weights, tiny_lm, write_spec


def decoded(rows: np.ndarray) -> list[str]:
    return [bytes(row.astype(np.uint8)).decode() for row in rows]


def test_windows_and_the_held_out_end_of_every_document(tmp_path: Path) -> None:
    """Each document's last 20% of bytes are its test windows, the 15% before its
    validation windows; no window spans a cut or a document; targets are the last S."""
    spec = lm_spec(tmp_path)
    data = {**spec["data"], "validation_fraction": 0.15}
    dataset = load_dataset(data, tmp_path)
    assert dataset.task == "classification" and dataset.num_classes == 256
    assert dataset.x_train.dtype == np.int64 and dataset.x_train.shape[1] == 32
    np.testing.assert_array_equal(dataset.y_train, dataset.x_train[:, -8:])
    np.testing.assert_array_equal(dataset.y_test, dataset.x_test[:, -8:])
    assert dataset.y_validation is not None and dataset.x_validation is not None
    np.testing.assert_array_equal(dataset.y_validation, dataset.x_validation[:, -8:])
    expected: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
    for name in sorted(DOCUMENTS):
        text = DOCUMENTS[name]
        cuts = [0, round(len(text) * (1 - 0.2 - 0.15)), round(len(text) * (1 - 0.2)), len(text)]
        for part, (start, stop) in zip(expected, itertools.pairwise(cuts)):
            piece = text[start:stop]
            expected[part] += [piece[i : i + 32] for i in range(0, len(piece) - 31, 16)]
    assert decoded(dataset.x_train) == expected["train"]
    assert decoded(dataset.x_validation) == expected["validation"]
    assert decoded(dataset.x_test) == expected["test"]


def test_episodes_are_one_per_document(tmp_path: Path) -> None:
    spec = lm_spec(tmp_path)
    dataset = load_dataset({**spec["data"], "episodes": True}, tmp_path)
    assert dataset.episode_train is not None and dataset.episode_test is not None
    assert sorted(set(dataset.episode_train.tolist())) == [0, 1, 2]
    assert sorted(set(dataset.episode_test.tolist())) == [0, 1, 2]
    digits = decoded(dataset.x_test[dataset.episode_test == 2])
    assert digits and all(set(window) <= set("0123456789") for window in digits)


def test_a_folder_stands_for_its_text_files_and_max_documents_cuts(tmp_path: Path) -> None:
    spec = lm_spec(tmp_path)
    every = load_dataset(spec["data"], tmp_path)
    folder = load_dataset({**spec["data"], "files": ["."]}, tmp_path)
    np.testing.assert_array_equal(every.x_train, folder.x_train)
    first = load_dataset({**spec["data"], "max_documents": 1}, tmp_path)
    assert set("".join(decoded(first.x_train))) <= set("abcdefghijklmnopqrstuvwxyz")


def test_the_shipped_imdb_reviews_are_a_csv_corpus() -> None:
    data = {"name": "text", "csv": "package:imdb_train_subset.csv.gz", "column": "text", "length": 64,
            "scored": 16, "max_documents": 10}
    dataset = load_dataset(data)
    assert dataset.x_train.shape[1] == 64 and dataset.y_train.shape[1] == 16
    assert len(dataset.x_test) > 0 and dataset.source == "package:imdb_train_subset.csv.gz"


def context_of(tmp_path: Path, **sections: object) -> WorkflowContext:
    loaded = bayesflow.load(write_spec(tmp_path, lm_spec(tmp_path, **sections)))
    return WorkflowContext(loaded, load_data(loaded))


@pytest.mark.parametrize("trainable", [
    {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}},
    {"parameters": ["model.layers.1.*"]},
], ids=["lora", "last_layer"])
def test_the_context_builds_the_subset_problem_with_n_in_scored_tokens(
    tmp_path: Path, trainable: dict[str, object]
) -> None:
    context = context_of(tmp_path, model=tiny_lm(trainable=trainable))
    stage = Stage("fit/map/T=shared/seed=0", "fit", (), "k", "map", "map", None, 0)
    problem, likelihood, tempering = context.problem(stage)
    windows, scored = context.dataset.y_train.shape
    assert problem.num_data == windows * scored == tempering.num_data
    assert likelihood.name == "next_token" and problem.likelihood == "next_token"
    model = problem.module
    trainable_names = [name for name, value in model.named_parameters() if value.requires_grad]
    assert list(problem.param_names) == trainable_names
    assert problem.dimension == sum(value.numel() for name, value in model.named_parameters()
                                    if name in trainable_names)
    if "parameters" in trainable:
        assert all(name.startswith("model.layers.1.") for name in problem.param_names)
    # the stages share one frozen model: a second problem reads the same tensors
    again, _, _ = context.problem(stage)
    assert again.module is model
    x, _y = context.training_data(problem.device)
    params = problem.init_params(torch.Generator().manual_seed(0))
    logits = problem.forward(params, x[:2])
    assert logits.shape == (2, scored, 256)


def folder_spec(tmp_path: Path, vocabulary: int = 300) -> dict[str, object]:
    """A spec whose model is a folder (config, weights whose header alone validate reads, a
    tokenizer file) and whose data use the folder's tokenizer."""
    import transformers

    model = tmp_path / "model"
    save_weights(transformers.LlamaConfig(vocab_size=vocabulary, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64),
                 model)
    (model / "tokenizer.json").write_text("{}")
    spec = lm_spec(tmp_path, model={"name": "causal_lm", "path": "model",
                                    "trainable": {"parameters": ["model.layers.1.*"]}})
    spec["data"]["tokenizer"] = "model"
    return spec


def test_the_folder_tokenizer_is_the_one_call_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tokenizer: model`` encodes every document with the folder's encoder (bayesflow.llm.tokenizer)
    and takes its vocabulary as the number of classes."""
    import types

    seen: list[Path] = []
    fake = types.ModuleType("bayesflow.llm.tokenizer")
    fake.folder_encoder = lambda path: seen.append(path) or (lambda text: np.arange(len(text)) % 300)  # type: ignore[attr-defined]
    fake.folder_vocabulary = lambda path: 300  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bayesflow.llm.tokenizer", fake)
    loaded = bayesflow.load(write_spec(tmp_path, folder_spec(tmp_path)))
    dataset = load_data(loaded)
    assert dataset.num_classes == 300 and seen == [tmp_path / "model"]
    np.testing.assert_array_equal(dataset.x_train[0], np.arange(32))


def test_a_folder_byte_tokenizer_gives_the_byte_windows(tmp_path: Path) -> None:
    """With the project's byte-level tokenizer in the folder (bayesflow.llm.tokenizer),
    ``tokenizer: model`` gives the very windows of ``tokenizer: bytes``."""
    from bayesflow.llm.tokenizer import save_byte_tokenizer

    spec = folder_spec(tmp_path)
    (tmp_path / "model" / "tokenizer.json").unlink()
    save_byte_tokenizer(tmp_path / "model")
    by_model = load_data(bayesflow.load(write_spec(tmp_path, spec)))
    by_bytes = load_dataset({**spec["data"], "tokenizer": "bytes"}, tmp_path)  # type: ignore[dict-item]
    assert by_model.num_classes == 256
    np.testing.assert_array_equal(by_model.x_train, by_bytes.x_train)
    np.testing.assert_array_equal(by_model.y_test, by_bytes.y_test)


def test_a_folder_tokenizer_past_the_models_vocabulary_is_refused(tmp_path: Path) -> None:
    from bayesflow.errors import SpecError
    from bayesflow.llm.tokenizer import save_byte_tokenizer

    spec = folder_spec(tmp_path, vocabulary=200)
    (tmp_path / "model" / "tokenizer.json").unlink()
    save_byte_tokenizer(tmp_path / "model")
    loaded = bayesflow.load(write_spec(tmp_path, spec))
    with pytest.raises(SpecError, match=r"spec.yaml:\d+:\d+: data.tokenizer: the model folder's tokenizer has 256 "
                                        "token ids, but the model's vocabulary has 200"):
        load_data(loaded)


def test_without_the_tokenizer_module_the_folder_tokenizer_is_not_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bayesflow.errors import SpecError

    monkeypatch.setitem(sys.modules, "bayesflow.llm.tokenizer", None)
    loaded = bayesflow.load(write_spec(tmp_path, folder_spec(tmp_path)))
    with pytest.raises(SpecError, match=r"spec.yaml:\d+:\d+: data.tokenizer: `model` .* not yet available"):
        load_data(loaded)
