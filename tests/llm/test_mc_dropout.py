"""MC dropout on LoRA adapters (``mc_dropout``): its passes against the peft model's own
dropout in train mode, its p → 0 limit against MAP, its members' spread and seed, a run on
multiple-choice questions through ``bayesflow.run``, and its validate errors."""

from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import bayesflow
from bayesflow.engines.fit import fit
from bayesflow.errors import SpecError
from bayesflow.evaluate.predictive import predictive_outputs
from bayesflow.llm import build_causal_lm
from bayesflow.llm.dropout import adapter_dropouts, dropout_on
from bayesflow.llm.problem import build_lm_problem
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from bayesflow.tracking import InMemoryTracker
from bayesflow.variants import load_data
from tests.llm.conftest import tiny
from tests.llm.spec_helpers import write_spec
from tests.llm.test_multiple_choice import DATA, QUESTIONS

SCORED = 4


def lora_model(dropout: float) -> tuple[Any, tuple[str, ...]]:
    """A tiny config-built Llama with LoRA on q/v of its last layer at dropout ``dropout``."""
    config = tiny()
    config["trainable"]["lora"]["dropout"] = dropout
    return build_causal_lm(config)


def moved(problem: Any, seed: int = 0) -> torch.Tensor:
    """LoRA parameters away from the start (B ≠ 0), so the adapters and their dropout matter."""
    generator = torch.Generator().manual_seed(seed)
    start = problem.init_params(generator)
    return start + 0.3 * torch.randn(start.shape, generator=generator)


def with_params(model: Any, names: tuple[str, ...], params: torch.Tensor) -> Any:
    """A copy of ``model`` whose trainable tensors hold the flat vector ``params``."""
    copied = copy.deepcopy(model)
    own = dict(copied.named_parameters())
    offset = 0
    for name in names:
        size = own[name].numel()
        own[name].data.copy_(params[offset : offset + size].view_as(own[name]))
        offset += size
    return copied


@pytest.mark.slow
def test_passes_equal_the_peft_model_in_train_mode_under_the_same_generator() -> None:
    """K members through the predictive (vmapped, one member per call) equal a loop of K
    forward passes of the peft model itself with its dropout modules in train mode, under
    the same seed: the same masks, and so the same K-pass predictive."""
    model, names = lora_model(0.3)
    problem = build_lm_problem(model, names, diag_normal(1.0), 10, SCORED)
    params = moved(problem)
    inputs = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    members = params.unsqueeze(0).expand(5, -1)
    with dropout_on(problem.module, seed=7) as count:
        assert count == 2  # q_proj's and v_proj's adapter dropout
        passes = predictive_outputs(problem, members, inputs, chunk=1)
    reference = with_params(model, names, params)
    for child in adapter_dropouts(reference):
        child.train()
    torch.manual_seed(7)
    with torch.no_grad():
        loop = torch.stack([reference(input_ids=inputs, logits_to_keep=SCORED + 1).logits[:, :-1] for _ in range(5)])
    torch.testing.assert_close(passes, loop, rtol=1e-5, atol=1e-5)
    predictive = passes.softmax(-1).mean(0)
    torch.testing.assert_close(predictive, loop.softmax(-1).mean(0), rtol=1e-5, atol=1e-7)
    # A real check: the passes are not the deterministic forward.
    with torch.no_grad():
        assert (passes[0] - problem.forward(params, inputs)).abs().max() > 1e-3


def test_members_differ_and_repeat_with_the_seed() -> None:
    """With p > 0 the members' outputs differ from each other (all in one vmapped call);
    the same seed gives the same numbers bit for bit, another seed other numbers; outside
    the context the dropout is off again (every member the same network)."""
    model, names = lora_model(0.3)
    problem = build_lm_problem(model, names, diag_normal(1.0), 10, SCORED)
    members = moved(problem).unsqueeze(0).expand(4, -1)
    inputs = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    draws = []
    for seed in (3, 3, 4):
        with dropout_on(problem.module, seed):
            draws.append(predictive_outputs(problem, members, inputs))
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])
    for first in range(4):
        for second in range(first + 1, 4):
            assert (draws[0][first] - draws[0][second]).abs().max() > 1e-3
    assert not any(child.training for child in adapter_dropouts(model))
    plain = predictive_outputs(problem, members, inputs)
    assert torch.equal(plain[0], plain[3])


def fitted(name: str, model: Any, names: tuple[str, ...], **config: Any) -> Any:
    """A full-batch fit of engine ``name`` on random windows (its posterior)."""
    problem = build_lm_problem(model, names, diag_normal(1.0), 6 * SCORED, SCORED)
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 256, (6, 12), generator=generator)
    settings = {"engine": name, "optimizer": {"name": "adamw", "lr": 0.05}, "epochs": 3, "batch_size": None, **config}
    method = METHODS.get(name)
    engine = method.builder()(problem, Tempering(1.0, problem.num_data), method.spec.model_validate(settings))
    start = problem.init_params(torch.Generator().manual_seed(5))
    return problem, fit(engine, start, windows, windows[:, -SCORED:], generator).posterior


@pytest.mark.slow
def test_the_p_to_0_limit_is_the_map_fit_and_predictive() -> None:
    """At p = 1e-7 (masks all ones with probability 1 - 1e-4 here) MC dropout's fit is MAP's
    step for step and its K-pass predictive is MAP's; at p = 0.3 the fit moves elsewhere."""
    problem, map_posterior = fitted("map", *lora_model(1e-7))
    _, limit = fitted("mc_dropout", *lora_model(1e-7), passes=4)
    _, noisy = fitted("mc_dropout", *lora_model(0.3), passes=4)
    assert map_posterior.mean is not None and limit.samples is not None and noisy.samples is not None
    assert limit.samples.shape == (4, problem.dimension)
    torch.testing.assert_close(limit.samples[0], map_posterior.mean, rtol=1e-4, atol=1e-5)
    assert (noisy.samples[0] - map_posterior.mean).abs().max() > 1e-3
    inputs = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(9))
    with dropout_on(problem.module, seed=1):
        passes = predictive_outputs(problem, limit.samples, inputs).softmax(-1).mean(0)
    point = predictive_outputs(problem, map_posterior.mean[None], inputs).softmax(-1)[0]
    torch.testing.assert_close(passes, point, rtol=1e-4, atol=1e-6)


def choice_spec(folder: Path, dropout: float = 0.2, **sections: Any) -> dict[str, Any]:
    """The multiple-choice questions on the shipped byte-level checkpoint, MC dropout."""
    shutil.copy(QUESTIONS, folder / "questions.jsonl")
    model = {"name": "causal_lm", "path": "package:lm/checkpoint",
             "trainable": {"lora": {"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1],
                                    "dropout": dropout}}}
    spec: dict[str, Any] = {
        "name": "mc_dropout_tiny", "data": {**DATA, "tokenizer": "model"}, "model": model,
        "likelihood": {"name": "multiple_choice"}, "prior": {"name": "diag_normal", "variance": 1.0},
        "temperatures": [0.1, 1.0], "seeds": [0],
        "methods": {"dropout": {"engine": "mc_dropout", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2,
                                "batch_size": 4, "passes": 6}},
        "evaluate": {"n_samples": 4}, "plots": [], "report": {"enabled": False}, "tracking": {"uri": "memory://"},
        "execution": {"cache_dir": str(folder / "cache")},
    }
    spec.update(sections)
    return spec


@pytest.mark.slow
def test_a_run_on_questions_logs_the_metrics_and_a_loaded_posterior_repeats_them(tmp_path: Path) -> None:
    """``bayesflow.run`` of MC dropout on multiple-choice questions (the shipped byte-level
    checkpoint): one fit for both temperatures, test and validation accuracy, NLL, ECE;
    ``load_posterior(...).predict`` on the test questions repeats the logged test NLL (the
    same seeded passes), twice the same, and its passes differ from the dropout-off network."""
    loaded = bayesflow.load(write_spec(tmp_path, choice_spec(tmp_path)))
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(loaded, tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker)
    assert len(list((tmp_path / "cache").rglob("posterior.npz"))) == 1  # shared by T = 0.1 and 1
    for metric in ("test_accuracy", "test_nll", "test_ece", "test_brier", "val_nll", "val_accuracy"):
        assert frame[metric].notna().all(), metric
    assert frame["test_accuracy"].isin([0, 0.25, 0.5, 0.75, 1]).all()  # 4 test questions
    assert (frame["test_nll"] > 0).all() and frame["test_ece"].between(0, 1).all()
    (posterior_file,) = (tmp_path / "cache").rglob("posterior.npz")
    folder = tmp_path / "posterior"
    folder.mkdir()
    shutil.copy(posterior_file, folder / "posterior.npz")
    (folder / "spec.yaml").write_text(loaded.to_yaml())
    shutil.copy(tmp_path / "questions.jsonl", folder / "questions.jsonl")
    dataset = load_data(loaded)
    posterior = bayesflow.load_posterior(folder)
    assert posterior.engine == "mc_dropout"
    x_test, y_test = torch.as_tensor(dataset.x_test), torch.as_tensor(dataset.y_test)
    first, second = posterior.predict(x_test), posterior.predict(x_test)
    assert torch.equal(first, second)
    nll = -first[torch.arange(4), y_test].log().mean()
    assert float(nll) == pytest.approx(float(frame["test_nll"].iloc[0]), rel=1e-5)
    other = posterior.predict(x_test, seed=123)
    assert not torch.equal(first, other)
    assert (first.sum(-1) - 1).abs().max() < 1e-6 and math.isfinite(float(nll))


@pytest.mark.parametrize(
    ("model", "where", "says"),
    [
        ({"trainable": {"lora": {"r": 2, "dropout": 0.0}}}, "model.trainable.lora.dropout",
         "the dropout is 0, so every pass is the same network; set `model.trainable.lora.dropout`"),
        ({"trainable": {"lora": {"r": 2}}}, "model.trainable.lora",
         "the dropout is 0, so every pass is the same network; set `model.trainable.lora.dropout`"),
        ({"trainable": {"parameters": ["model.layers.1.*"]}}, "model.trainable.parameters",
         "a `parameters:` subset has no adapters and so no dropout; use `trainable: {lora: {dropout: 0.1}}`"),
    ],
)
def test_a_model_without_adapter_dropout_is_a_located_spec_error(
    tmp_path: Path, model: dict[str, Any], where: str, says: str
) -> None:
    """No dropout to leave on (dropout 0 or absent, a glob subset) is refused at validate,
    at the key, saying why and the fix."""
    spec = choice_spec(tmp_path)
    spec["model"] = {**tiny(), **model}
    with pytest.raises(SpecError) as caught:
        bayesflow.load(write_spec(tmp_path, spec))
    message = str(caught.value)
    assert f"{where}: methods.dropout (mc_dropout)" in message and says in message


def test_a_model_that_is_not_a_language_model_is_refused(tmp_path: Path) -> None:
    """MC dropout on an MLP: refused at the method's engine, naming the model to use."""
    spec = {"name": "flat", "data": {"name": "sklearn_digits"}, "model": {"name": "mlp"},
            "methods": {"dropout": {"engine": "mc_dropout"}}, "plots": [], "report": {"enabled": False}}
    with pytest.raises(SpecError) as caught:
        bayesflow.load(write_spec(tmp_path, spec))
    assert ("methods.dropout.engine: mc_dropout leaves a language model's LoRA dropout on at prediction, but "
            "`model.name` is 'mlp', which has none") in str(caught.value)


@pytest.mark.slow
def test_the_module_imports_without_torch() -> None:
    """The method module (and the dropout module's import) load no torch."""
    import subprocess
    import sys

    code = ("import sys, bayesflow.methods.mc_dropout, bayesflow.llm.dropout; "
            "assert 'torch' not in sys.modules, 'torch loaded'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
