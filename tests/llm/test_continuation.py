"""Multiple-choice questions scored as continuations (``data.scoring: continuation``, lm-eval's
``acc``): each choice's text after the prompt, its summed log-probability the categorical's
logit. A question is one row, its prompt packed with its continuations. The loader's rows, the
forward against transformers on each sequence ``prompt + continuation`` alone (with and
without the shared trunk, under the chains' vmap), the spec's checks, and a fit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.data.multiple_choice import PADDING, continuations_of, prompt_of, read_questions
from bayesflow.llm import build_causal_lm
from bayesflow.llm.choices import build_choice_problem
from bayesflow.priors import none
from bayesflow.spec.choice import CONTINUATION_TEMPLATE, MultipleChoiceSpec
from bayesflow.stages.fit import VALIDATION_PRECISIONS
from bayesflow.tracking import InMemoryTracker
from bayesflow.variants import load_data
from tests.llm.conftest import tiny
from tests.llm.spec_helpers import tiny_lm, write_spec
from tests.llm.test_multiple_choice import (
    QUESTIONS,
    assert_equals_the_whole_forward,
    choice_spec,
    random_lora,
    validate,
)
from tests.llm.test_validate import line_of

# Bytes as tokens: a question's prompt, then " honey" (the continuation) after it.
DATA = {"name": "multiple_choice", "path": "questions.jsonl", "scoring": "continuation", "test_fraction": 0.25,
        "validation_fraction": 0.125}


def continuation_spec(folder: Path, **sections: Any) -> dict[str, Any]:
    """The 16 test questions scored as continuations on a tiny config-built Llama."""
    return choice_spec(folder, **{"data": dict(DATA), **sections})


def decoded(ids: np.ndarray) -> str:
    return bytes(ids[ids != PADDING].astype(np.uint8).tolist()).decode()


def test_a_row_packs_the_prompt_with_every_continuation_then_their_lengths(tmp_path: Path) -> None:
    """A row holds the question's prompt followed by each choice's continuation, left-padded,
    then the continuations' lengths; the default template lists no choices; the dataset
    records the most continuation tokens of a question over every set."""
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path))))
    spec = MultipleChoiceSpec.model_validate(DATA)
    assert spec.template == CONTINUATION_TEMPLATE
    questions = {prompt_of(question, spec): question for question in read_questions(QUESTIONS, spec, "data.path")}
    assert "Question: What do bees make?\nAnswer:" in questions
    seen = 0
    for x, y in ((dataset.x_train, dataset.y_train), (dataset.x_validation, dataset.y_validation),
                 (dataset.x_test, dataset.y_test)):
        for row, answer in zip(x, y):
            text, lengths = decoded(row[:-4]), row[-4:]
            prompt = next(prompt for prompt in questions if text.startswith(prompt))
            question = questions[prompt]
            continuations = continuations_of(question, spec)
            assert text == prompt + "".join(continuations)
            assert lengths.tolist() == [len(part.encode()) for part in continuations]
            assert row[-5] != PADDING and answer == question.answer
            seen += 1
    assert seen == len(questions) == 16
    assert dataset.continuation_tokens == max(
        sum(len(text.encode()) for text in continuations_of(q, spec)) for q in questions.values())


def own_scores(model: Any, problem: Any, params: torch.Tensor, row: np.ndarray, count: int) -> torch.Tensor:
    """transformers' summed log-probability of each choice's continuation, each sequence
    ``prompt + continuation`` run alone (unpadded), the problem's tensors set in the model."""
    values = dict(model.named_parameters())
    saved = {name: values[name].detach().clone() for name in problem.param_names}
    sizes = [int(np.prod(shape)) for shape in problem.param_shapes]
    ids, lengths = row[:-count][row[:-count] != PADDING], row[-count:]
    prompt = ids[: len(ids) - int(lengths.sum())]
    ends = np.cumsum(lengths)
    scores = []
    with torch.no_grad():
        for name, piece, shape in zip(problem.param_names, params.split(sizes), problem.param_shapes):
            values[name].copy_(piece.reshape(shape))
        for end, length in zip(ends, lengths):
            text = ids[len(prompt) + end - length: len(prompt) + end]
            sequence = torch.as_tensor(np.concatenate([prompt, text]))
            log_probs = model(sequence[None], use_cache=False).logits[0].double().log_softmax(-1)
            positions = torch.arange(len(prompt), len(sequence))
            scores.append(log_probs[positions - 1, sequence[positions]].sum())
        for name, value in saved.items():
            values[name].copy_(value)
    return torch.stack(scores)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def language_model(request: pytest.FixtureRequest) -> tuple[Any, tuple[str, ...]]:
    """A tiny config-built model with LoRA on its last layer, and its trainable names."""
    torch.manual_seed(0)
    return build_causal_lm(tiny(request.param, context=128))


@pytest.mark.parametrize("share_trunk", [True, False])
def test_continuation_logits_equal_each_sequence_alone(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]], share_trunk: bool
) -> None:
    """The forward's (n, C) logits are each choice's summed continuation log-probability
    as transformers computes it on the sequence alone, for prompts and continuations of
    different lengths padded in one batch, with and without the shared trunk."""
    from bayesflow.llm.trunk import forget_kept

    forget_kept()
    model, names = language_model
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path))))
    longest = dataset.continuation_tokens
    assert longest is not None
    problem = build_choice_problem(model, names, none(), 1, None, share_trunk=share_trunk,
                                   continuation=(4, longest))
    params = random_lora(problem)
    # A batch holding the data's most continuation tokens, and one short of it (the output
    # layer then runs at fewer positions).
    x = np.concatenate([dataset.x_train, dataset.x_test])
    totals = x[:, -4:].sum(-1)
    most = x[totals == longest][:1]
    short = x[totals < longest][:3]
    for batch in (np.concatenate([most, short]), short):
        inputs = torch.as_tensor(batch)
        lengths = inputs[:, -4:]
        assert len(set(lengths.flatten().tolist())) > 2  # continuations of different lengths
        with torch.no_grad():
            logits = problem.forward(params, inputs).double()
        direct = torch.stack([own_scores(model, problem, params, row.numpy(), 4) for row in inputs])
        assert logits.shape == (len(inputs), 4)
        torch.testing.assert_close(logits, direct, rtol=1e-5, atol=1e-4)


def test_chains_share_the_trunk_of_every_choice_sequence(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]]
) -> None:
    """Three chains under vmap, each with its own minibatch (a ChainBatch): the layers below
    the adapters run once per distinct sequence, and the values and gradients equal the
    whole forward's."""
    from torch.func import vmap

    from bayesflow.engines.base import ChainBatch
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.llm.trunk import forget_kept, split_trunk

    forget_kept()
    model, names = language_model
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path))))
    choices = (4, int(dataset.continuation_tokens or 0))
    shared = build_choice_problem(model, names, none(), 4, None, continuation=choices)
    whole = build_choice_problem(model, names, none(), 4, None, share_trunk=False, continuation=choices)
    inputs, answers = torch.as_tensor(dataset.x_train[:4]), torch.as_tensor(dataset.y_train[:4])
    chains = torch.stack([random_lora(shared, seed) for seed in (1, 2, 3)])
    calls: list[int] = []  # the trunk's rows: one a question
    trunk = split_trunk(model, names)
    assert trunk is not None
    handle = trunk.layers[0].register_forward_hook(lambda _m, args, _o: calls.append(int(args[0].shape[0])))
    try:
        own = ChainBatch(inputs.expand(3, -1, -1), answers.expand(3, -1))
        grads, values = chain_gradient(shared, 1.0)(chains, own)
        with torch.no_grad():
            found = vmap(shared.forward, in_dims=(0, None))(chains, inputs)
        assert sum(calls) == 4  # four questions, each once with its four continuations
    finally:
        handle.remove()
    assert_equals_the_whole_forward(whole, chains, inputs, own, found, values, grads)


SPEC_PROBLEMS = {
    "no_question": ({"template": "Answer:"}, "data.template", "needs the placeholders {question} (and {choices}"),
    "no_choice": ({"continuation": " the answer"}, "data.continuation", "needs the placeholder {choice} and no"),
    "scoring": ({"scoring": "letters"}, "data.scoring", "expected one of: label, continuation, got 'letters'"),
}


@pytest.mark.parametrize("case", sorted(SPEC_PROBLEMS))
def test_continuation_spec_problems_are_refused_where_written(tmp_path: Path, case: str) -> None:
    """A template without the question, a continuation without the choice, an unknown
    scoring: located spec errors that say what is wanted."""
    change, key, wanted = SPEC_PROBLEMS[case]
    message = validate(tmp_path, continuation_spec(tmp_path, data={**DATA, **change}))
    assert wanted in message, message
    assert f"spec.yaml:{line_of(tmp_path, key)}:" in message, message


def test_a_prompt_and_choice_longer_than_the_context_is_named(tmp_path: Path) -> None:
    """The context check counts the prompt with its longest continuation."""
    (tmp_path / "long.jsonl").write_text(
        '{"question": "q", "choices": ["' + "x" * 140 + '", "b", "c", "d"], "answer": 0}\n')
    data = {**DATA, "splits": {"train": "long.jsonl"}}
    del data["path"], data["test_fraction"], data["validation_fraction"]
    message = validate(tmp_path, continuation_spec(tmp_path, data=data))
    assert "long.jsonl line 1: its prompt with its longest choice is 160 tokens, longer than the model's context of " \
           "128 tokens" in message, message


@pytest.mark.slow
def test_the_adapters_posteriors_on_continuations_log_the_classifier_metrics(tmp_path: Path) -> None:
    """MAP, a diagonal and a KFAC Laplace from it (the KFAC prior chosen by the evidence and
    by the validation NLL), mean-field VI on the adapters (BLoB's
    family), parallel SGHMC and MC dropout on continuation-scored questions, at two
    temperatures: every fit logs test and validation accuracy, NLL, ECE and Brier."""
    methods = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 4},
               "laplace": {"engine": "laplace_diag_ggn", "from": "map"},
               "vi": {"engine": "vi_diag", "optimizer": {"name": "adam", "lr": 0.01}, "epochs": 2, "batch_size": 4},
               "sghmc": {"engine": "sghmc", "lr": 0.01, "alpha": 3.0, "epochs": 2, "batch_size": 4, "chains": 2,
                         "keep": "last"},
               "kfac": {"engine": "laplace_kfac_ggn", "from": "map"},
               "kfac_val": {"engine": "laplace_kfac_ggn", "from": "map", "prior_variance": "validation"},
               "mc_dropout": {"engine": "mc_dropout", "epochs": 2, "batch_size": 4, "passes": 3}}
    model = tiny_lm()
    model["trainable"]["lora"]["dropout"] = 0.1
    spec = {**continuation_spec(tmp_path, methods=methods, temperatures=[0.5, 1.0], model=model),
            "execution": {"cache_dir": str(tmp_path / "cache")}}
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker)
    for method in ("laplace", "vi", "sghmc", "kfac", "kfac_val"):  # a fit of its own at each temperature
        assert sorted(frame.loc[frame["method"] == method, "temperature"]) == [0.5, 1.0], method
    frame = frame.set_index("method")
    assert set(frame.index) == {"map", "laplace", "vi", "sghmc", "kfac", "kfac_val", "mc_dropout"}
    # Laplace-LoRA's `val` option: a variance of the grid, its validation NLL logged.
    chosen = frame.loc["kfac_val", "prior_variance_chosen"]
    assert all(any(abs(1 / value - precision) < 1e-9 * precision for precision in VALIDATION_PRECISIONS)
               for value in chosen)
    assert frame.loc["kfac_val", "val_nll_prior_chosen"].between(0, 50).all()
    for metric in ("test_accuracy", "test_nll", "test_ece", "test_brier", "val_nll", "val_accuracy"):
        assert frame[metric].notna().all(), metric
    assert frame["test_accuracy"].isin([0, 0.25, 0.5, 0.75, 1]).all()  # 4 test questions
    assert (frame["test_nll"] > 0).all() and frame["test_ece"].between(0, 1).all()


@pytest.mark.slow  # 2-4 s a family: KFAC's hooks through a transformer
@pytest.mark.parametrize("kind", ["ggn", "fisher"])
def test_kfac_factors_of_packed_questions_are_the_sum_of_each_question_alone(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KFAC on continuation-scored questions: every real position of a packed question is a
    row, the padding and the length columns none, so a padded batch's factors are the sums
    of each question's unpadded; with the length columns read as tokens they are not."""
    from bayesflow.engines.kfac import Layers, accumulate_factors
    from bayesflow.llm import choices
    from bayesflow.llm.kfac import choice_kfac_layers, real_positions

    model, names = language_model
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path))))
    problem = build_choice_problem(model, names, none(), 4, None, continuation=(4, int(dataset.continuation_tokens or 0)))
    assert problem.observation.length_columns == 4  # type: ignore[union-attr]
    layers = choice_kfac_layers(problem, 4)
    params = random_lora(problem)
    monkeypatch.setattr(choices, "LENGTH_GROUP", 4)  # a batch larger than an evaluation's group
    inputs, answers = torch.as_tensor(dataset.x_train[:8]), torch.as_tensor(dataset.y_train[:8])
    batch = accumulate_factors(problem, layers, params, (inputs, answers), kind)
    alone = sum(accumulate_factors(problem, layers, params, (row[row != PADDING][None], answer[None]), kind)
                for row, answer in zip(inputs, answers))
    assert isinstance(alone, torch.Tensor) and float(alone.abs().max()) > 0
    torch.testing.assert_close(batch, alone, rtol=1e-4, atol=1e-6)
    as_tokens = Layers(layers.forward, layers.layers, positions=real_positions)  # the lengths read as tokens
    counted = accumulate_factors(problem, as_tokens, params, (inputs, answers), kind)
    assert not torch.allclose(counted, alone, rtol=1e-3)


def test_the_trunk_keeps_each_prompt_without_its_padding(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]]
) -> None:
    """The same questions padded wider read the rows kept the first time (the trunk runs no
    more) and give the same logits; the batch is cut to its longest prompt."""
    import inspect

    from bayesflow.llm.trunk import forget_kept, trimmed

    forget_kept()
    model, names = language_model
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path))))
    problem = build_choice_problem(model, names, none(), 4, None, continuation=(4, int(dataset.continuation_tokens or 0)))
    one = inspect.getclosurevars(problem.forward).nonlocals["one"]  # the forward of one length group
    trunk = inspect.getclosurevars(one).nonlocals["trunk"]
    params = random_lora(problem)
    inputs = torch.as_tensor(dataset.x_train[:4])
    wider = torch.cat([torch.full((4, 5), PADDING), inputs], dim=1)
    assert torch.equal(trimmed(wider, 4), trimmed(inputs, 4))
    assert trimmed(inputs, 4).shape[1] == int((inputs[:, :-4] != PADDING).sum(-1).max()) + 4
    with torch.no_grad():
        first = problem.forward(params, inputs)
        computed = trunk.computed
        again = problem.forward(params, wider)
    assert computed == 4 and trunk.computed == computed
    torch.testing.assert_close(again, first, rtol=0, atol=0)  # the same rows, the same computation


@pytest.mark.slow
def test_a_prior_chosen_on_validation_rows_needs_them(tmp_path: Path) -> None:
    """`prior_variance: validation` without validation questions: the fit fails naming the
    fix, and nothing is logged as finished."""
    methods = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 1, "batch_size": 4},
               "kfac_val": {"engine": "laplace_kfac_ggn", "from": "map", "prior_variance": "validation"}}
    data = {**DATA, "validation_fraction": None}
    spec = {**continuation_spec(tmp_path, methods=methods, data=data),
            "execution": {"cache_dir": str(tmp_path / "cache")}}
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)), tracker=InMemoryTracker(tmp_path / "a"))
    assert result.exit_code != 0
    assert "the data hold no validation rows; set data.validation_fraction" in str(result.outcome.errors)


@pytest.mark.parametrize("scoring", ["label", "continuation"])
def test_a_large_batch_runs_in_length_order_and_gives_each_questions_own_logits(
    tmp_path: Path, language_model: tuple[Any, tuple[str, ...]], scoring: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More questions than one length group (an evaluation's batch): run a group at a time
    (four here) in order of length and put back in the batch's order, the logits equal
    those of each question alone."""
    from bayesflow.llm import choices

    monkeypatch.setattr(choices, "LENGTH_GROUP", 4)
    model, names = language_model
    data = {**DATA, "scoring": scoring, "validation_fraction": None, "test_fraction": 0.1}
    if scoring == "label":
        data.update(labels=["A", "B", "C", "D"], template="Question: {question}\n{choices}\nAnswer: ")
    dataset = load_data(bayesflow.load(write_spec(tmp_path, continuation_spec(tmp_path, data=data))))
    continuation = (4, int(dataset.continuation_tokens)) if dataset.continuation_tokens else None
    problem = build_choice_problem(model, names, none(), 4, None if continuation else [65, 66, 67, 68],
                                   continuation=continuation)
    params = random_lora(problem)
    inputs = torch.as_tensor(dataset.x_train)
    assert len(inputs) > choices.LENGTH_GROUP
    with torch.no_grad():
        found = problem.forward(params, inputs)
        alone = torch.cat([problem.forward(params, inputs[row:row + 1]) for row in range(len(inputs))])
    torch.testing.assert_close(found, alone, rtol=1e-5, atol=1e-5)
