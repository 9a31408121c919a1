"""The next-token likelihood's temperature convention, and MAP (AdamW) and SGHMC run by the
engines unchanged on a tiny LoRA subset of a language model over IMDB byte windows."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import pytest
import torch

from bayesflow.engines.fit import fit
from bayesflow.families import CAUSAL_LM, methods_for
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.text import read_csv_column, token_windows
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from tests.llm.conftest import tiny
from tests.numerics import reordered

IMDB = Path(str(resources.files("bayesflow.data") / "files" / "imdb_train_subset.csv.gz"))
LENGTH, SCORED = 32, 8


def corpus(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    documents = read_csv_column(IMDB, "text")[:count]
    inputs, targets = token_windows(documents, LENGTH, LENGTH, SCORED)
    return torch.as_tensor(inputs), torch.as_tensor(targets)


@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_n_counts_scored_tokens_so_the_tempered_target_is_exp_minus_u_over_t(
    temperature: float, convention: str
) -> None:
    torch.manual_seed(0)
    model, names = build_causal_lm(tiny())
    inputs, targets = corpus(3)
    num_data = targets.numel()
    problem = build_lm_problem(model, names, diag_normal(0.3), num_data, SCORED)
    tempering = Tempering(temperature, problem.num_data, convention)
    params = problem.init_params(torch.Generator().manual_seed(1)) + 0.1
    # exp(f / 𝒯) with f the per-datum log posterior the engines use ...
    log_target = problem.log_posterior(params, (inputs, targets), tempering.prior_weight) / tempering.per_datum
    # ... against −U/T written out: every scored token's log p, and the prior
    logits = model(inputs, use_cache=False).logits  # LoRA B = 0.1 set below
    with torch.no_grad():
        offset = 0
        for name, value in model.named_parameters():
            if name in names:
                value.copy_(params[offset : offset + value.numel()].view_as(value))
                offset += value.numel()
        logits = model(inputs, use_cache=False).logits
    log_p = logits.log_softmax(-1)[:, LENGTH - SCORED - 1 : LENGTH - 1].gather(-1, targets.unsqueeze(-1)).sum()
    log_prior = float(-0.5 * params.square().sum() / 0.3 - 0.5 * params.numel() * math.log(2 * math.pi * 0.3))
    expected = (log_p + log_prior) / temperature if convention == "posterior" else log_p / temperature + log_prior
    torch.testing.assert_close(log_target, expected, **reordered(torch.float32, num_data * 256, scale=float(expected.abs())))


def run(name: str, problem, data, **config) -> object:
    spec = METHODS.get(name).spec.model_validate({"engine": name, **config})
    engine = METHODS.get(name).builder()(problem, Tempering(1.0, problem.num_data), spec)
    generator = torch.Generator().manual_seed(0)
    return fit(engine, problem.init_params(generator), *data, generator)


def test_map_with_adamw_and_sghmc_run_on_a_lora_subset() -> None:
    torch.manual_seed(0)
    model, names = build_causal_lm(tiny(trainable={"lora": {"r": 4, "alpha": 8, "target_modules":
                                                        ["q_proj", "v_proj", "lm_head"]}}))
    data = corpus(4)
    problem = build_lm_problem(model, names, diag_normal(1.0), data[1].numel(), SCORED)
    frozen = {n: p.clone() for n, p in model.named_parameters() if n not in names}
    start = problem.init_params(torch.Generator().manual_seed(0))
    before = -float(problem.log_posterior(start, data, 0.0))
    fitted = run("map", problem, data, epochs=20, batch_size=None,
                 optimizer={"name": "adamw", "lr": 1e-1, "weight_decay": 0.0})
    mode = fitted.posterior.mean
    after = -float(problem.log_posterior(mode, data, 0.0))
    assert after < before - 1.0, (before, after)  # the adapters learn the windows' bytes
    assert fitted.history[-1] < fitted.history[0]
    sampled = run("sghmc", problem, data, epochs=2, batch_size=16, chains=3, burn_in=1,
                  thin=1, lr=1e-4, alpha=1.0)
    samples = sampled.posterior.samples
    assert samples.shape[-1] == problem.dimension and torch.isfinite(samples).all()
    # the chains start apart (LoRA's A) and stay distinct; the frozen weights never move
    last = samples.view(3, -1, problem.dimension)[:, -1]
    assert (last[0] - last[1]).abs().max() > 0
    for name, value in model.named_parameters():
        if name not in names:
            assert torch.equal(value, frozen[name]), name


# Every method whose engine reads only gradients and log posteriors runs unchanged on a
# language-model subset. The Laplace, EKF and conjugate engines take one gradient or one GGN
# per example (a window, here S tokens) and are not among them: a language model's Laplace
# is bayesflow.llm.curvature's token Fisher (test_curvature.py).
# The list is the family registry's (bayesflow.families.methods_for, from the traits), less
# the curvature methods (test_curvature.py, test_kfac_method.py) and ``base``, which keeps the
# model's own weights and so has nothing to move.
GRADIENT_METHODS = [
    pytest.param(name, marks=pytest.mark.slow) if name == "nuts" else name
    for name in methods_for(CAUSAL_LM)
    if METHODS.get(name).traits.curvature is None and name != "base"
]
assert len(GRADIENT_METHODS) >= 10, GRADIENT_METHODS


@pytest.mark.parametrize("subset", ["lora", "last_layer"])
@pytest.mark.parametrize("name", GRADIENT_METHODS)
def test_gradient_methods_run_on_a_language_model_subset(name: str, subset: str) -> None:
    from tests.engines.helpers import make_config

    trainable = None if subset == "lora" else {"parameters": ["model.layers.1.mlp.*"]}
    model, names = build_causal_lm(tiny() if trainable is None else tiny(trainable=trainable))
    windows = torch.randint(0, 256, (24, 12), generator=torch.Generator().manual_seed(0))
    problem = build_lm_problem(model, names, diag_normal(1.0), 24 * 4, 4)
    engine = METHODS.get(name).builder()(problem, Tempering(0.5, problem.num_data), make_config(name))
    start = problem.init_params(torch.Generator().manual_seed(1))
    posterior = fit(engine, start, windows, windows[:, -4:], torch.Generator().manual_seed(0)).posterior
    values = posterior.samples if posterior.samples is not None else posterior.mean
    assert values is not None and values.shape[-1] == problem.dimension
    assert torch.isfinite(values).all()
    assert not torch.equal(values.reshape(-1, problem.dimension)[-1], start)  # it moved


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("ivon", {"lr": 0.3, "hess_init": 0.1, "beta2": 0.99}),
        ("swag", {"lr": 0.1, "momentum": 0.9, "burn_in": 15, "collect_every": 1, "rank": 4}),
    ],
)
def test_ivon_and_swag_fits_learn_the_windows(name: str, config: dict) -> None:
    """IVON's mean and SWAG's draws on a LoRA subset fit the windows' bytes better than the
    pretrained start (the per-token NLL, at the worst draw, falls by more than half a nat)."""
    torch.manual_seed(0)
    model, names = build_causal_lm(tiny(trainable={"lora": {"r": 4, "alpha": 8, "target_modules":
                                                        ["q_proj", "v_proj", "lm_head"]}}))
    data = corpus(4)
    problem = build_lm_problem(model, names, diag_normal(1.0), data[1].numel(), SCORED)
    start = problem.init_params(torch.Generator().manual_seed(0))
    before = -float(problem.log_posterior(start, data, 0.0))
    fitted = run(name, problem, data, epochs=20, batch_size=None, **config)
    posterior = fitted.posterior
    points = posterior.mean.unsqueeze(0) if posterior.mean is not None else posterior.samples
    after = max(-float(problem.log_posterior(point, data, 0.0)) for point in points)
    # Measured: 5.55 → 4.39 (IVON's mean), 5.55 → at worst 4.32 (SWAG's 30 draws).
    assert after < before - 0.5, (before, after)
