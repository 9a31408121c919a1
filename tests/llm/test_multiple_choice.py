"""Multiple-choice questions on a causal language model: the loader's prompts, padding and
splits; every bad input a located spec error at validate; the padded forward and the
likelihood against transformers on each prompt alone; fits that log accuracy, NLL, ECE and
Brier."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.dag.plan import Stage
from bayesflow.data.multiple_choice import PADDING, prompt_of, read_questions
from bayesflow.errors import SpecError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.choices import build_choice_problem
from bayesflow.priors import none
from bayesflow.spec.choice import MultipleChoiceSpec
from bayesflow.stages.context import WorkflowContext
from bayesflow.tracking import InMemoryTracker
from bayesflow.variants import load_data
from tests.llm.conftest import tiny
from tests.llm.spec_helpers import tiny_lm, write_spec
from tests.llm.test_validate import line_of

QUESTIONS = Path(__file__).parent / "files" / "questions.jsonl"
# One byte per label (the byte tokenizer), the answer's byte after "Answer: ".
DATA = {"name": "multiple_choice", "path": "questions.jsonl", "labels": ["A", "B", "C", "D"],
        "template": "Question: {question}\n{choices}\nAnswer: ", "test_fraction": 0.25,
        "validation_fraction": 0.125}


def choice_spec(folder: Path, **sections: Any) -> dict[str, Any]:
    """A spec over the 16 shipped test questions, a tiny config-built Llama, MAP."""
    shutil.copy(QUESTIONS, folder / "questions.jsonl")
    spec: dict[str, Any] = {
        "name": "mc_tiny", "data": dict(DATA), "model": tiny_lm(), "likelihood": {"name": "multiple_choice"},
        "prior": {"name": "diag_normal", "variance": 1.0}, "temperatures": [1.0], "seeds": [0],
        "methods": {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2,
                            "batch_size": 4}},
        "evaluate": {"n_samples": 3}, "plots": [], "report": {"enabled": False},
        "tracking": {"uri": "memory://"},
    }
    spec.update(sections)
    return spec


def validate(folder: Path, spec: dict[str, Any]) -> str:
    """The message of the SpecError that loading ``spec`` and its data raises."""
    with pytest.raises(SpecError) as caught:
        load_data(bayesflow.load(write_spec(folder, spec)))
    return str(caught.value)


def test_prompts_are_left_padded_and_split_by_the_seed(tmp_path: Path) -> None:
    """Each row is its question's prompt in bytes after -1 padding; 16 questions split
    10/2/4 by the seed, in file order, every question in one split."""
    dataset = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path))))
    assert (len(dataset.y_train), len(dataset.y_validation), len(dataset.y_test)) == (10, 2, 4)
    assert dataset.num_classes == 4 and dataset.task == "classification"
    spec = MultipleChoiceSpec.model_validate(DATA)
    questions = read_questions(QUESTIONS, spec, "data.path")
    prompts = {prompt_of(question, spec) for question in questions}
    assert "Question: What do bees make?\nA. silk\nB. wool\nC. honey\nD. milk\nAnswer: " in prompts
    seen = []
    for x, y in ((dataset.x_train, dataset.y_train), (dataset.x_validation, dataset.y_validation),
                 (dataset.x_test, dataset.y_test)):
        assert (x[:, -1] != PADDING).all()  # the answer position is the last column
        for row, answer in zip(x, y):
            real = row[row != PADDING]
            assert (row[: len(row) - len(real)] == PADDING).all()  # padding only before the prompt
            text = bytes(real.astype(np.uint8).tolist()).decode()
            assert text in prompts
            seen.append((text, int(answer)))
    assert sorted(seen) == sorted((prompt_of(q, spec), q.answer) for q in questions)
    again = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path))))
    np.testing.assert_array_equal(again.x_test, dataset.x_test)


def test_split_files_a_csv_with_choice_columns_and_shift_sets(tmp_path: Path) -> None:
    """Given split files in CSV with one column per choice and letter answers; a named
    shift set read alongside; a field the files lack is named with its line."""
    header = "question,A,B,C,D,key\n"
    (tmp_path / "train.csv").write_text(header + "What is two plus two?,three,four,five,six,B\n"
                                        "Which is a bird?,robin,trout,frog,newt,A\n")
    (tmp_path / "test.csv").write_text(header + "Which is cold?,ice,fire,sun,lava,0\n")
    (tmp_path / "far.csv").write_text(header + "Which is loud?,drum,feather,moss,cloud,A\n")
    data = {"name": "multiple_choice", "splits": {"train": "train.csv", "test": "test.csv"},
            "labels": ["A", "B", "C", "D"], "template": DATA["template"]}
    message = validate(tmp_path, choice_spec(tmp_path, data=data))
    assert f"spec.yaml:{line_of(tmp_path, 'data.splits.train')}:" in message
    assert "data.splits.train: train.csv line 2: no field 'choices' (its fields: question, A, B, C, D, key)" in message
    data.update(choices=["A", "B", "C", "D"], answer="key", shift={"far": "far.csv"})
    dataset = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path, data=data))))
    assert dataset.y_train.tolist() == [1, 0] and dataset.y_test.tolist() == [0] and dataset.y_validation is None
    assert bytes(dataset.x_train[0][dataset.x_train[0] >= 0].astype(np.uint8).tolist()).decode() == (
        "Question: What is two plus two?\nA. three\nB. four\nC. five\nD. six\nAnswer: ")
    ((name, x, y),) = dataset.shifts
    assert name == "far" and x.shape[0] == 1 and y.tolist() == [0]


BAD_RECORDS = {
    "missing": ('{"question": "q", "choices": ["a", "b", "c", "d"]}', "line 3: no field 'answer'"),
    "range": ('{"question": "q", "choices": ["a", "b", "c", "d"], "answer": 4}',
              "line 3: field 'answer' is 4, outside the 4 choices (0-3)"),
    "varying": ('{"question": "q", "choices": ["a", "b", "c"], "answer": 0}',
                "line 3: field 'choices' has 3 choices, but the questions before it have 4"),
    "not_json": ('{"question": "q", ', "line 3: not JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_record_is_located_at_its_file_line_and_field(tmp_path: Path, case: str) -> None:
    """A missing field, an answer out of range, a choice list of another length, a line
    that is not JSON: the spec's line of `data.path`, the file's line, the field."""
    record, expected = BAD_RECORDS[case]
    spec = choice_spec(tmp_path)
    lines = QUESTIONS.read_text().splitlines()
    (tmp_path / "questions.jsonl").write_text("\n".join([*lines[:2], record, *lines[2:]]) + "\n")
    message = validate(tmp_path, spec)
    assert f"spec.yaml:{line_of(tmp_path, 'data.path')}:3: data.path: questions.jsonl {expected}" in message


@pytest.mark.parametrize(("data", "model", "key", "expected"), [
    ({"labels": None}, {}, "data",
     "data.labels: ' A' is 2 tokens [32, 65] in the bytes tokenizer, but a label must be exactly one token"),
    ({}, {"context": 60}, "data.path",
     "questions.jsonl line 11: its prompt is 92 tokens, longer than the model's context of 60 tokens (16 of the "
     "file's 16 prompts are)"),
    ({"labels": ["A", "B", "C"]}, {}, "data.labels", "3 labels for questions of 4 choices (questions.jsonl line 1)"),
], ids=["label_tokens", "context", "label_count"])
def test_labels_and_prompt_lengths_are_checked_against_the_model(
    tmp_path: Path, data: dict[str, Any], model: dict[str, Any], key: str, expected: str
) -> None:
    """A label that is not one token, a prompt past the model's context, a label count
    that is not the number of choices."""
    spec = choice_spec(tmp_path, model=tiny_lm(**model))
    spec["data"] = {name: value for name, value in {**spec["data"], **data}.items() if value is not None}
    message = validate(tmp_path, spec)
    assert expected in message
    assert f"spec.yaml:{line_of(tmp_path, key)}:" in message


@pytest.mark.parametrize(("sections", "key", "expected"), [
    ({"data": {**DATA, "template": "Q: {question}\nAnswer:"}}, "data.template",
     "needs the placeholders {question} and {choices}"),
    ({"data": {**DATA, "splits": {"train": "questions.jsonl"}}}, "data",
     "give exactly one of `path` (split by fractions) or `splits`"),
    ({"likelihood": {"name": "next_token"}}, "likelihood.name",
     "a causal_lm model on 'multiple_choice' data is scored by its own likelihood: use `likelihood: "
     "{name: multiple_choice}`"),
    ({"model": {"name": "mlp"}}, "likelihood.name",
     "multiple_choice scores the answers to questions of a causal language model"),
    ({"methods": {"map": {"engine": "map"}, "ekf": {"engine": "ekf_dense_fisher"}}},
     "methods.ekf.engine", "ekf_dense_fisher cannot run on a causal language model (it needs one gradient"),
], ids=["template", "path_and_splits", "next_token", "mlp", "ekf"])
def test_spec_problems_are_refused_where_written(
    tmp_path: Path, sections: dict[str, Any], key: str, expected: str
) -> None:
    """Problems found on the spec alone, before any file is read."""
    with pytest.raises(SpecError) as caught:
        bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path, **sections)))
    lines = [line for line in str(caught.value).splitlines() if expected in line]
    assert any(f"spec.yaml:{line_of(tmp_path, key)}:" in line for line in lines), str(caught.value)


def random_lora(problem: Any, seed: int = 1) -> torch.Tensor:
    """Parameters whose LoRA B is not zero, so the adapters change the logits."""
    return torch.randn(problem.dimension, generator=torch.Generator().manual_seed(seed)) * 0.3


def own_answer_logits(model: Any, problem: Any, params: torch.Tensor, prompt: np.ndarray) -> torch.Tensor:
    """transformers' next-token logits at the last position of ``prompt`` run alone
    (unpadded), with the problem's tensors set in the model."""
    values = dict(model.named_parameters())
    saved = {name: values[name].detach().clone() for name in problem.param_names}
    sizes = [int(np.prod(shape)) for shape in problem.param_shapes]
    with torch.no_grad():
        for name, piece, shape in zip(problem.param_names, params.split(sizes), problem.param_shapes):
            values[name].copy_(piece.reshape(shape))
        logits = model(torch.as_tensor(prompt)[None], use_cache=False).logits[0, -1]
        for name, value in saved.items():
            values[name].copy_(value)
    return logits.double()


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def language_model(request: pytest.FixtureRequest) -> tuple[Any, tuple[str, ...]]:
    """A tiny config-built model with LoRA on its last layer, and its trainable names."""
    torch.manual_seed(0)
    return build_causal_lm(tiny(request.param, context=128))


def test_padded_answer_logits_and_log_probabilities_equal_each_prompt_alone(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]]
) -> None:
    """The forward's (n, C) logits of the label tokens at the answer position, on prompts of
    different lengths left-padded in one batch, equal transformers' logits of each prompt
    run alone; the likelihood's log p is log_softmax over those label logits."""
    model, names = language_model
    labels = [65, 66, 67, 68]
    problem = build_choice_problem(model, names, none(), 1, labels)
    dataset = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path))))
    params = random_lora(problem)
    inputs, answers = torch.as_tensor(dataset.x_train[:4]), torch.as_tensor(dataset.y_train[:4])
    assert len({int((row >= 0).sum()) for row in inputs}) > 2  # prompts of different lengths
    with torch.no_grad():
        logits = problem.forward(params, inputs).double()
        log_prob = problem.log_likelihood(problem.forward(params, inputs), answers).double()
    direct = torch.stack([own_answer_logits(model, problem, params, row[row >= 0].numpy()) for row in inputs])
    expected = direct[:, labels].log_softmax(-1)[torch.arange(len(answers)), answers]
    assert (logits - direct[:, labels]).abs().max() < 1e-5
    assert (log_prob - expected).abs().max() < 1e-5
    assert problem.data_points(answers) == len(answers)


def test_the_frozen_trunk_runs_each_padded_prompt_once_and_changes_nothing(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]]
) -> None:
    """LoRA on the last layer: the layers below run once per padded prompt, for three chains
    and again for the next call, and the chains' answer logits and gradients equal the
    whole forward's."""
    from torch.func import vmap

    from bayesflow.engines.base import ChainBatch
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.llm.trunk import forget_kept, split_trunk

    forget_kept()
    model, names = language_model
    shared = build_choice_problem(model, names, none(), 4, [65, 66, 67, 68])
    whole = build_choice_problem(model, names, none(), 4, [65, 66, 67, 68], share_trunk=False)
    dataset = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path))))
    inputs, answers = torch.as_tensor(dataset.x_train[:4]), torch.as_tensor(dataset.y_train[:4])
    chains = torch.stack([random_lora(shared, seed) for seed in (1, 2, 3)])
    calls: list[int] = []
    trunk = split_trunk(model, names)
    assert trunk is not None and trunk.start == 1
    first = trunk.layers[0]
    handle = first.register_forward_hook(lambda _m, args, _o: calls.append(int(args[0].shape[0])))
    try:
        with torch.no_grad():
            found = vmap(shared.forward, in_dims=(0, None))(chains, inputs)
            vmap(shared.forward, in_dims=(0, None))(chains, inputs)
        own = ChainBatch(inputs.expand(3, -1, -1), answers.expand(3, -1))
        grads, values = chain_gradient(shared, 1.0)(chains, own)
        assert sum(calls) == 4  # four prompts, once each (one call per prompt length)
    finally:
        handle.remove()
    assert_equals_the_whole_forward(whole, chains, inputs, own, found, values, grads)


def assert_equals_the_whole_forward(
    whole: Any, chains: torch.Tensor, inputs: torch.Tensor, own: Any, found: torch.Tensor, values: torch.Tensor,
    grads: torch.Tensor,
) -> None:
    """The chains' outputs, values and gradients (through a shared trunk) equal those of the
    problem ``whole`` that runs the whole forward, to float32 reordering."""
    from torch.func import vmap

    from bayesflow.engines.gradient import chain_gradient
    from tests.numerics import reordered

    with torch.no_grad():
        expected = vmap(whole.forward, in_dims=(0, None))(chains, inputs)
    expected_grads, expected_values = chain_gradient(whole, 1.0)(chains, own)
    terms = 64 * inputs.shape[1]
    torch.testing.assert_close(found, expected, **reordered(torch.float32, terms))
    torch.testing.assert_close(values, expected_values, **reordered(torch.float32, terms))
    scale = float(expected_grads.abs().max())
    assert scale > 0
    torch.testing.assert_close(grads, expected_grads, **reordered(torch.float32, terms, scale=scale))


def context_of(folder: Path, **sections: Any) -> WorkflowContext:
    loaded = bayesflow.load(write_spec(folder, choice_spec(folder, **sections)))
    return WorkflowContext(loaded, load_data(loaded))


def test_the_family_builds_the_choice_problem_with_n_in_questions(tmp_path: Path) -> None:
    """Through the stages' context: N = training questions, outputs (n, 4), the
    temperature's N the same."""
    context = context_of(tmp_path)
    stage = Stage("fit/map/T=shared/seed=0", "fit", (), "k", "map", "map", None, 0)
    problem, likelihood, tempering = context.problem(stage)
    assert likelihood.name == problem.likelihood == "multiple_choice"
    assert problem.num_data == tempering.num_data == len(context.dataset.y_train) == 10
    x, _ = context.training_data(problem.device)
    assert problem.forward(problem.init_params(torch.Generator().manual_seed(0)), x[:3]).shape == (3, 4)


@pytest.mark.slow  # 2-4 s a family on the shared CPU: torch.func's first passes through a transformer
def test_per_question_diagonal_fisher_is_the_sum_of_squared_question_gradients(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]]
) -> None:
    """The diagonal Laplaces' per-example curvature runs on padded prompts under vmap: the
    empirical Fisher is Σ over questions of the squared gradient of each one alone."""
    from bayesflow.engines.curvature import diagonal_fisher

    model, names = language_model
    problem = build_choice_problem(model, names, none(), 1, [65, 66, 67, 68])
    dataset = load_data(bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path))))
    inputs, answers = torch.as_tensor(dataset.x_train[:3]), torch.as_tensor(dataset.y_train[:3])
    params = random_lora(problem)
    fisher = diagonal_fisher(problem, params, (inputs, answers))
    expected = torch.zeros_like(params)
    for row, answer in zip(inputs, answers):
        prompt = row[row >= 0][None]  # the question alone, unpadded
        gradient = torch.func.grad(lambda p: problem.log_likelihood(problem.forward(p, prompt), answer[None])[0])(params)
        expected += gradient**2
    torch.testing.assert_close(fisher, expected, rtol=1e-4, atol=1e-9)


@pytest.mark.slow
def test_map_and_a_diagonal_laplace_log_accuracy_nll_ece_and_brier(tmp_path: Path) -> None:
    """A run with MAP and laplace_diag_ggn from it: every fit logs the classifier's test
    and validation metrics over the questions."""
    methods = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 4},
               "laplace": {"engine": "laplace_diag_ggn", "from": "map"}}
    spec = {**choice_spec(tmp_path, methods=methods), "execution": {"cache_dir": str(tmp_path / "cache")}}
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker).set_index("method")
    assert set(frame.index) == {"map", "laplace"}
    for metric in ("test_accuracy", "test_nll", "test_ece", "test_brier", "val_nll", "val_accuracy"):
        assert frame[metric].notna().all(), metric
    assert frame["test_accuracy"].isin([0, 0.25, 0.5, 0.75, 1]).all()  # 4 test questions
    assert (frame["test_nll"] > 0).all() and frame["test_ece"].between(0, 1).all()


@pytest.mark.slow
def test_kfac_laplaces_log_accuracy_nll_and_ece_at_two_temperatures(tmp_path: Path) -> None:
    """MAP, then laplace_kfac_ggn (Laplace-LoRA: its prior chosen by the evidence, the
    linearised predictive's probit) and laplace_kfac_fisher from it at T = 1 and T = 0.5,
    through ``bayesflow.run``: every Laplace fit logs the test accuracy, NLL and ECE over the
    questions, and its evidence."""
    methods = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 4},
               "kfac_ggn": {"engine": "laplace_kfac_ggn", "from": "map", "prior_variance": "auto",
                            "prediction": "closed_form"},
               "kfac_fisher": {"engine": "laplace_kfac_fisher", "from": "map", "batch_size": 4}}
    spec = {**choice_spec(tmp_path, methods=methods), "temperatures": [1.0, 0.5],
            "evaluate": {"n_samples": 200}, "execution": {"cache_dir": str(tmp_path / "cache")}}
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker)
    laplaces = frame[frame["method"].isin(["kfac_ggn", "kfac_fisher"])]
    assert sorted(zip(laplaces["method"], laplaces["temperature"].astype(float))) == [
        ("kfac_fisher", 0.5), ("kfac_fisher", 1.0), ("kfac_ggn", 0.5), ("kfac_ggn", 1.0)]
    for metric in ("test_accuracy", "test_nll", "test_ece", "log_evidence"):
        assert laplaces[metric].notna().all(), metric
    assert laplaces["prior_variance_chosen"].notna().sum() == 2  # kfac_ggn at both temperatures
    assert (laplaces["test_nll"] > 0).all() and laplaces["test_ece"].between(0, 1).all()


@pytest.mark.slow
def test_bayesflow_validate_exits_3_at_the_records_line(tmp_path: Path) -> None:
    """The command line: an answer out of range is exit 3 with the spec's line, the file's
    line and the field, no traceback; the good file validates."""
    import subprocess
    import sys

    write_spec(tmp_path, choice_spec(tmp_path))
    good = subprocess.run([sys.executable, "-m", "bayesflow.cli", "validate", "spec.yaml"], check=False,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    lines = QUESTIONS.read_text().splitlines()
    lines[4] = lines[4].replace('"answer": 0', '"answer": 7')
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n")
    bad = subprocess.run([sys.executable, "-m", "bayesflow.cli", "validate", "spec.yaml"], check=False,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 3 and "Traceback" not in bad.stderr
    assert (f"spec.yaml:{line_of(tmp_path, 'data.path')}:3: data.path: questions.jsonl line 5: field 'answer' is 7, "
            "outside the 4 choices (0-3)") in bad.stderr


def test_the_shipped_checkpoint_reads_its_folder_tokenizer_and_context_in_bfloat16(tmp_path: Path) -> None:
    """A folder model (the shipped byte-level checkpoint, frozen weights in bfloat16): the
    labels through its own tokenizer are the bytes, its context comes from config.json,
    and the padded label logits equal each prompt run alone within bfloat16's rounding."""
    model = {"name": "causal_lm", "path": "package:lm/checkpoint", "dtype": "bfloat16",
             "trainable": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}}}
    context = context_of(tmp_path, model=model, data={**DATA, "tokenizer": "model"})
    stage = Stage("fit/map/T=shared/seed=0", "fit", (), "k", "map", "map", None, 0)
    problem, _, _ = context.problem(stage)
    inputs = torch.as_tensor(context.dataset.x_train[:3])
    params = random_lora(problem)
    with torch.no_grad():
        logits = problem.forward(params, inputs).double()
    direct = torch.stack([own_answer_logits(problem.module, problem, params, row[row >= 0].numpy()) for row in inputs])
    assert (logits - direct[:, [65, 66, 67, 68]]).abs().max() < 1e-2  # one bfloat16 step at |logit| ≈ 1: 2⁻⁷
    data = {name: value for name, value in DATA.items() if name != "labels"}
    message = validate(tmp_path, choice_spec(tmp_path, model={**model, "dtype": "float32"},
                                             data={**data, "tokenizer": "model"}))
    assert "data.labels: ' A' is 2 tokens [32, 65] in the model tokenizer" in message


@pytest.mark.slow
def test_a_loaded_posterior_predicts_the_logged_test_nll(tmp_path: Path) -> None:
    """``load_posterior`` of a MAP fit's folder (its posterior.npz and resolved spec) predicts
    the test questions' choice probabilities whose NLL is the run's ``test_nll``."""
    loaded = bayesflow.load(write_spec(tmp_path, {**choice_spec(tmp_path),
                                                  "execution": {"cache_dir": str(tmp_path / "cache")}}))
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(loaded, tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    logged = bayesflow.results(result.run_id, tracker=tracker).set_index("method").loc["map", "test_nll"]
    (fitted,) = (tmp_path / "cache").rglob("posterior.npz")
    folder = tmp_path / "posterior"
    folder.mkdir()
    shutil.copy(fitted, folder / "posterior.npz")
    (folder / "spec.yaml").write_text(loaded.to_yaml())
    shutil.copy(tmp_path / "questions.jsonl", folder / "questions.jsonl")
    dataset = load_data(loaded)
    probabilities = bayesflow.load_posterior(folder).predict(torch.as_tensor(dataset.x_test)).double()
    assert probabilities.shape == (4, 4)
    nll = -probabilities[torch.arange(4), torch.as_tensor(dataset.y_test)].log().mean()
    assert float(nll) == pytest.approx(logged, rel=1e-5)
