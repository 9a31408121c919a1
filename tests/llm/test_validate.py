"""Bad input to a ``causal_lm`` spec is a located spec error at validate (exit 3), never a
traceback, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bayesflow
from bayesflow.errors import SpecError
from bayesflow.families import CAUSAL_LM, methods_for
from bayesflow.methods import METHODS
from bayesflow.spec.llm_checks import refusal
from bayesflow.variants import load_data
from tests.llm.spec_helpers import lm_spec, save_weights, tiny_lm, write_spec


def problems(folder: Path, spec: dict[str, Any]) -> str:
    """The message of the SpecError that loading ``spec`` and its data raises."""
    path = write_spec(folder, spec)
    with pytest.raises(SpecError) as caught:
        load_data(bayesflow.load(path))
    return str(caught.value)


def line_of(folder: Path, key: str) -> int:
    """The 1-based line of the spec file where the dotted ``key`` (``model.trainable``) is
    written, found by indentation."""
    wanted, stack = key.split("."), []
    for number, line in enumerate((folder / "spec.yaml").read_text().splitlines(), 1):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("-") or ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        stack = [(depth, name) for depth, name in stack if depth < indent] + [(indent, stripped.split(":")[0])]
        if [name for _, name in stack] == wanted:
            return number
    raise AssertionError(f"{key} is not in the spec")


def test_a_good_spec_validates(tmp_path: Path) -> None:
    loaded = bayesflow.load(write_spec(tmp_path, lm_spec(tmp_path)))
    assert load_data(loaded).x_train.shape[1] == 32


def test_the_missing_extra_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    message = problems(tmp_path, lm_spec(tmp_path))
    assert f"spec.yaml:{line_of(tmp_path, 'model')}:" in message
    assert "model: a causal language model needs `transformers`" in message
    assert "pip install 'bayesflow-workflows[llm]'" in message


def folder_model(folder: Path, *, weights: bool = True, context: int = 16) -> Path:
    """A model folder: a real config.json, the weights of its model (validate reads their
    safetensors header only) and a tokenizer file."""
    import transformers

    model = folder / "model"
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, max_position_embeddings=context)
    if weights:
        save_weights(config, model)
    else:
        config.save_pretrained(model)
    (model / "tokenizer.json").write_text("{}")
    return model


@pytest.mark.parametrize("case", ["absent", "no_weights", "context"])
def test_a_model_folder_is_checked_from_its_listing_and_config(tmp_path: Path, case: str) -> None:
    folder_model(tmp_path, weights=case != "no_weights")
    path = "elsewhere" if case == "absent" else "model"
    model = {"name": "causal_lm", "path": path, "trainable": {"parameters": ["model.layers.1.*"]}}
    message = problems(tmp_path, lm_spec(tmp_path, model=model))
    if case == "absent":
        assert f"spec.yaml:{line_of(tmp_path, 'model.path')}:" in message and "model.path: no folder" in message
    elif case == "no_weights":
        assert "lacks weights" in message and "it holds: config.json, tokenizer.json" in message
    else:  # config.json's 16 positions, windows of 32: the file of weights is never read
        assert f"spec.yaml:{line_of(tmp_path, 'data.length')}:" in message
        assert "data.length: windows of 32 tokens exceed the model's context of 16 tokens" in message


def test_a_package_folder_resolves_under_the_shipped_files(tmp_path: Path) -> None:
    from bayesflow.llm.source import check_folder

    with pytest.raises(SpecError, match=r"no folder '.*bayesflow/data/files/lm/absent'"):
        check_folder("package:lm/absent", tmp_path)


def test_gpt2_lora_targets_are_checked_on_its_structure(tmp_path: Path) -> None:
    gpt2 = {"name": "causal_lm", "family": "gpt2", "hidden_size": 32, "layers": 2, "heads": 2, "context": 64,
            "trainable": {"lora": {"target_modules": ["c_attn"], "layers": [-1]}}}
    assert load_data(bayesflow.load(write_spec(tmp_path, lm_spec(tmp_path, model=gpt2)))).num_classes == 256
    gpt2["trainable"] = {"lora": {"target_modules": ["q_proj"]}}
    message = problems(tmp_path, lm_spec(tmp_path, model=gpt2))
    assert "['q_proj'] name no linear module of the model; it has: c_attn, c_fc, c_proj, lm_head" in message


def test_a_folder_model_that_fits_validates_without_reading_its_weights(tmp_path: Path) -> None:
    folder_model(tmp_path, context=64)
    model = {"name": "causal_lm", "path": "model", "trainable": {"parameters": ["model.layers.1.*"]}}
    loaded = bayesflow.load(write_spec(tmp_path, lm_spec(tmp_path, model=model)))
    assert load_data(loaded).num_classes == 256


@pytest.mark.parametrize("case", ["truncated", "garbage", "shard"])
def test_a_weights_file_that_is_not_whole_is_refused_at_validate(tmp_path: Path, case: str) -> None:
    """A truncated `model.safetensors` (or one that is no safetensors file, or a missing
    shard) is a located error at `model.path` naming the file, found from its header alone,
    not the run's `incomplete metadata, file not fully covered` (issue 33, item 12)."""
    import json

    model = folder_model(tmp_path, context=64)
    weights = model / "model.safetensors"
    if case == "truncated":
        data = weights.read_bytes()
        weights.write_bytes(data[:-100])
    elif case == "garbage":
        weights.write_bytes(b"not weights at all")
    else:
        weights.rename(model / "model-00001-of-00002.safetensors")
        header = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
        (model / "model.safetensors.index.json").write_text(json.dumps(header))
    spec = lm_spec(tmp_path, model={"name": "causal_lm", "path": "model",
                                    "trainable": {"parameters": ["model.layers.1.*"]}})
    message = problems(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'model.path')}:" in message
    assert "model.path:" in message
    if case == "truncated":
        assert f"weights file {str(weights)!r} holds" in message and "(truncated)" in message
    elif case == "garbage":
        assert f"weights file {str(weights)!r} announces a header of" in message
    else:
        assert "names shard(s) model-00002-of-00002.safetensors that" in message


@pytest.mark.parametrize("case", ["more_layers", "fewer_layers", "wider"])
def test_weights_that_are_not_the_configs_model_are_refused_at_validate(tmp_path: Path, case: str) -> None:
    """A config.json that claims more layers than the weights hold (a run would initialise
    them at random and freeze them), fewer, or another width is a located error at
    `model.path` naming the folder and the first tensors, from the header alone (issue 33,
    item 13)."""
    import json

    model = folder_model(tmp_path, context=64)
    config = json.loads((model / "config.json").read_text())
    config.update({"more_layers": {"num_hidden_layers": 3}, "fewer_layers": {"num_hidden_layers": 1},
                   "wider": {"intermediate_size": 96}}[case])
    (model / "config.json").write_text(json.dumps(config))
    spec = lm_spec(tmp_path, model={"name": "causal_lm", "path": "model",
                                    "trainable": {"parameters": ["model.layers.0.*"]}})
    message = problems(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'model.path')}:" in message
    assert f"model.path: the weights in {str(model)!r} do not match the model its config.json builds" in message
    if case == "more_layers":
        assert ("the weights lack tensors the config's model has (transformers would initialise them at random, "
                "and they would stay frozen): model.layers.2.self_attn.q_proj.weight, ") in message
        assert "and 5 more" in message
    elif case == "fewer_layers":
        assert "the weights hold tensors the config's model does not have: model.layers.1." in message
    else:
        assert "shapes differ: model.layers.0.mlp.down_proj.weight [32, 64] in model.safetensors, [32, 96] in the model" in message
    assert "use the config.json saved with these weights" in message


def test_a_gpt2_checkpoint_with_tied_head_and_no_prefix_validates(tmp_path: Path) -> None:
    """transformers' own conventions are no mismatch: a tied `lm_head.weight` absent from
    the file, a GPT-2 base model's names without the `transformer.` prefix."""
    import transformers

    model = tmp_path / "model"
    config = transformers.GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    transformers.GPT2Model(config).save_pretrained(model)  # no head, no prefix
    (model / "tokenizer.json").write_text("{}")
    gpt2 = {"name": "causal_lm", "path": "model", "trainable": {"parameters": ["transformer.h.1.*"]}}
    assert load_data(bayesflow.load(write_spec(tmp_path, lm_spec(tmp_path, model=gpt2)))).num_classes == 256


def test_an_empty_list_of_lora_layers_is_refused_where_written(tmp_path: Path) -> None:
    """`trainable.lora.layers: []` would adapt every layer (peft reads an empty list as
    "all"): a located error saying to omit the key for all layers (issue 33, item 15)."""
    model = tiny_lm(trainable={"lora": {"target_modules": ["q_proj"], "layers": []}})
    message = problems(tmp_path, lm_spec(tmp_path, model=model))
    assert f"spec.yaml:{line_of(tmp_path, 'model.trainable.lora.layers')}:" in message
    assert "model.trainable.lora.layers" in message
    assert "an empty list names no layer, yet peft would adapt every layer; omit `layers`" in message


@pytest.mark.parametrize(("trainable", "key", "text"), [
    ({"lora": {"target_modules": ["qkv"]}}, "model.trainable.lora.target_modules",
     ("model.trainable.lora.target_modules: ['qkv'] name no linear module of the model; it has: "
     "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj")),
    ({"lora": {"layers": [5]}}, "model.trainable.lora.layers", "model.trainable.lora.layers: [5] out of range; the model has 2"),
    ({"parameters": ["model.layers.7.*"]}, "model.trainable.parameters",
     "model.trainable.parameters: pattern(s) ['model.layers.7.*'] match no parameter tensor"),
], ids=["target", "layer", "glob"])
def test_a_subset_naming_nothing_lists_what_exists(
    tmp_path: Path, trainable: dict[str, Any], key: str, text: str
) -> None:
    message = problems(tmp_path, lm_spec(tmp_path, model=tiny_lm(trainable=trainable)))
    assert f"spec.yaml:{line_of(tmp_path, key)}:" in message and text in message


def test_an_attention_that_cannot_batch_chains_is_refused(tmp_path: Path) -> None:
    path = write_spec(tmp_path, lm_spec(tmp_path, model=tiny_lm(attention="sdpa")))
    with pytest.raises(SpecError, match="attention 'sdpa' cannot run chains") as caught:
        bayesflow.load(path)
    assert f"spec.yaml:{line_of(tmp_path, 'model.attention')}:" in str(caught.value)


def test_a_model_path_given_on_the_command_line_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_folder, elsewhere = tmp_path / "spec", tmp_path / "work"
    spec_folder.mkdir()
    elsewhere.mkdir()
    path = write_spec(spec_folder, lm_spec(spec_folder))
    monkeypatch.chdir(elsewhere)
    loaded = bayesflow.load(path, ["model.family=null", "+model.path=mine"])
    assert loaded.spec.model.path == str(elsewhere / "mine")


def test_text_files_given_on_the_command_line_are_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole list, or one entry of it: those entries from the working directory, the
    spec file's own entries (and absolute or package: paths) as written."""
    spec_folder, elsewhere = tmp_path / "spec", tmp_path / "work"
    spec_folder.mkdir()
    (elsewhere / "books").mkdir(parents=True)
    for name in ("x.txt", "books/y.txt"):
        (elsewhere / name).write_text("The quick brown fox jumps over the lazy dog. " * 6)
    path = write_spec(spec_folder, lm_spec(spec_folder))
    monkeypatch.chdir(elsewhere)
    listed = bayesflow.load(path, [f"data.files=[x.txt,books,{spec_folder / 'a.txt'}]"]).spec.data.files
    assert listed == [str(elsewhere / "x.txt"), str(elsewhere / "books"), str(spec_folder / "a.txt")]
    one = bayesflow.load(path, ["data.files.1=x.txt"]).spec.data.files
    assert one == ["a.txt", str(elsewhere / "x.txt"), "c.txt"]
    assert bayesflow.load(path).spec.data.files == ["a.txt", "b.txt", "c.txt"]


def test_byte_tokens_need_a_vocabulary_of_256(tmp_path: Path) -> None:
    message = problems(tmp_path, lm_spec(tmp_path, model=tiny_lm(vocab_size=128)))
    assert f"spec.yaml:{line_of(tmp_path, 'model.vocab_size')}:" in message
    assert "model.vocab_size: the byte tokenizer gives token ids 0-255, but the model's vocabulary has 128" in message


def test_a_window_longer_than_a_config_models_context(tmp_path: Path) -> None:
    spec = lm_spec(tmp_path, model=tiny_lm(context=16))
    message = problems(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'data.length')}:" in message
    assert "windows of 32 tokens exceed the model's context of 16 tokens (model.context)" in message


@pytest.mark.parametrize("case", ["empty", "latin1"])
def test_an_empty_or_non_utf8_file_is_located_at_its_entry(tmp_path: Path, case: str) -> None:
    spec = lm_spec(tmp_path)
    (tmp_path / "b.txt").write_bytes(b"  \n" if case == "empty" else "café".encode("latin-1"))
    message = problems(tmp_path, spec)
    lines = (tmp_path / "spec.yaml").read_text().splitlines()
    entry = next(number for number, line in enumerate(lines, 1) if line.strip() == "- b.txt")
    assert f"spec.yaml:{entry}" in message and "data.files.1:" in message
    assert ("is empty" if case == "empty" else "is not UTF-8 text (byte 3") in message


def test_a_missing_csv_column_names_the_columns(tmp_path: Path) -> None:
    data = {"name": "text", "csv": "package:imdb_train_subset.csv.gz", "column": "review", "length": 32, "scored": 8}
    message = problems(tmp_path, lm_spec(tmp_path, data=data))
    assert f"spec.yaml:{line_of(tmp_path, 'data.column')}:" in message
    assert "has no column 'review'; its columns are: text" in message


@pytest.mark.parametrize(("sections", "key", "text"), [
    ({"data": {"name": "imdb"}}, "model.name", "causal_lm reads choice_prompts or text_tokens inputs, but data 'imdb' gives tokens"),
    ({"model": {"name": "mlp"}, "likelihood": {"name": "categorical"}}, "model.name",
     "mlp reads features or tokens inputs, but data 'text' gives text_tokens"),
    ({"model": {"name": "mlp"}}, "likelihood.name", "next_token scores the tokens of a causal language model"),
    ({"likelihood": {"name": "categorical"}}, "likelihood.name", "use `likelihood: {name: next_token}`"),
    ({"methods": {"ekf": {"engine": "ekf_diag_fisher"}}}, "methods.ekf.engine",
     "ekf_diag_fisher cannot run on a causal language model"),
    ({"methods": {"map": {"engine": "map"}, "kfac": {"engine": "laplace_kfac_ggn", "from": "map"}}}, "methods.kfac.engine",
     ("laplace_kfac_ggn cannot run on a causal language model (its G takes one backward pass per class of "
      "the vocabulary (32k-128k tokens); use laplace_kfac_fisher")),
    ({"evaluate": {"prior_predictive": True}}, "evaluate.prior_predictive", "a language model's frozen weights"),
    ({"evaluate": {"prediction": "linearized_mc"}}, "evaluate.prediction", "use `sampled`"),
    ({"data": {"name": "text", "files": ["a.txt"], "length": 8, "scored": 8}}, "data.scored", "use scored < length"),
    ({"evaluate": {"reference": "map"}}, "evaluate.reference", "which is not compared yet"),
    ({"data": {"name": "text", "files": ["a.txt"], "tokenizer": "model"}}, "data.tokenizer",
     "the model is built from a config (no `model.path`); use `tokenizer: bytes`"),
], ids=["imdb_data", "mlp_on_text", "next_token_on_mlp", "categorical", "ekf", "kfac", "prior_predictive",
        "linearized", "scored", "reference", "tokenizer"])
def test_pairs_that_cannot_run_are_refused_where_written(
    tmp_path: Path, sections: dict[str, Any], key: str, text: str
) -> None:
    path = write_spec(tmp_path, lm_spec(tmp_path, **sections))
    with pytest.raises(SpecError) as caught:
        bayesflow.load(path)
    message = str(caught.value)
    assert text in message
    lines = [line for line in message.splitlines() if text in line]
    assert any(f"spec.yaml:{line_of(tmp_path, key)}:" in line for line in lines), message


def test_methods_that_run_on_a_language_model_are_listed(tmp_path: Path) -> None:
    path = write_spec(tmp_path, lm_spec(tmp_path, methods={"ekf": {"engine": "ekf_dense_fisher"}}))
    with pytest.raises(SpecError, match="methods that can: ") as caught:
        bayesflow.load(path)
    listed = str(caught.value).split("methods that can: ")[1].split("\n")[0].split(", ")
    # The list comes from the registry and the methods' traits, not from a list typed here.
    expected = methods_for(CAUSAL_LM)
    assert expected and set(listed) == set(expected)
    for name in METHODS.names():
        traits = METHODS.get(name).traits
        refused = refusal(traits)
        assert (name in listed) == (refused is None), (name, refused)
        if traits.per_example_rows or (traits.curvature is not None and traits.curvature.startswith("dense")):
            assert name not in listed and refused, name
    assert "ekf_dense_fisher" not in listed  # the method the spec asked for


@pytest.mark.slow
@pytest.mark.parametrize("case", ["target", "context", "empty_file"])
def test_the_command_line_exits_3_and_writes_nothing(tmp_path: Path, case: str) -> None:
    spec = lm_spec(tmp_path)
    spec["tracking"] = {"uri": "sqlite:///mlflow.db"}
    if case == "target":
        spec["model"] = tiny_lm(trainable={"lora": {"target_modules": ["c_attn"]}})
    elif case == "context":
        spec["model"] = tiny_lm(context=16)
    else:
        (tmp_path / "c.txt").write_text("")
    write_spec(tmp_path, spec)
    before = sorted(path.name for path in tmp_path.iterdir())
    for command in ("validate", "run"):
        result = subprocess.run([sys.executable, "-m", "bayesflow.cli", command, "spec.yaml"], check=False, cwd=tmp_path,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 3, result.stdout + result.stderr
        assert "Traceback" not in result.stderr and "spec.yaml:" in result.stderr
        # nothing written: no store, no report, no cached stage (run holds the cache's lock file)
        written = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")
                         if path.name not in before and path.is_file())
        assert written == ([] if command == "validate" else [".bayesflow/cache/.lock"][: len(written)]), written
