"""``map`` and ``mle`` with every torchopt optimiser, momentum, weight decay and schedule."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pydantic
import pytest
import torch

from bayesflow.engines.base import Problem
from bayesflow.engines.fit import fit
from bayesflow.engines.optimize import build_schedule
from bayesflow.methods import METHODS
from bayesflow.methods.base import ScheduleSpec
from bayesflow.temperature import Tempering
from tests.engines.helpers import NOISE_SD, NUM_DATA, Regression, exact, run

SCHEDULES = ["constant", "cosine", "linear", "exponential"]


@pytest.mark.parametrize(
    "optimizer",
    [
        {"name": "sgd", "lr": 0.3, "momentum": 0.9},
        {"name": "adam", "lr": 0.05, "schedule": {"kind": "cosine"}},
        {"name": "adamw", "lr": 0.05, "schedule": {"kind": "linear"}},
        {"name": "adam", "lr": 0.05, "schedule": {"kind": "exponential", "final_fraction": 0.001}},
    ],
    ids=["sgd-momentum", "adam-cosine", "adamw-linear", "adam-exponential"],
)
def test_optimizers_find_the_mode(regression: Regression, optimizer: dict[str, Any]) -> None:
    """Each optimiser and schedule converges to the posterior mode."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    posterior = run("map", regression, 1.0, "posterior", epochs=300, optimizer=optimizer)
    sd = target.marginal_var.sqrt()
    # Adam's last steps are of order lr · final_fraction: measured within 0.02 sd.
    assert ((posterior.mean - target.mean).abs() / sd).max() < 0.05


def test_sgd_momentum_is_heavy_ball(regression: Regression) -> None:
    """``sgd`` with momentum μ takes the steps ``b ← μ b + ∇loss; θ ← θ − lr b``."""
    problem, inputs, targets = regression
    lr, momentum, steps = 0.2, 0.5, 10
    optimizer = {"name": "sgd", "lr": lr, "momentum": momentum}
    start = problem.init_params(torch.Generator().manual_seed(0))
    posterior = run("map", regression, 1.0, "posterior", start, epochs=steps, optimizer=optimizer)
    params, velocity = start.clone(), torch.zeros_like(start)
    for _ in range(steps):
        gradient = -torch.func.grad(problem.log_posterior)(params, (inputs, targets))
        velocity = momentum * velocity + gradient
        params = params - lr * velocity
    torch.testing.assert_close(posterior.mean, params, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_weight_decay_is_an_l2_penalty(regression: Regression, name: str) -> None:
    """``mle`` with L2 weight decay w converges to ridge regression with penalty w·N/2."""
    _, inputs, targets = regression
    decay = 0.5
    lr = 0.5 if name == "sgd" else 0.05
    optimizer = {"name": name, "lr": lr, "weight_decay": decay, "schedule": {"kind": "cosine"}}
    posterior = run("mle", regression, 1.0, "posterior", epochs=400, optimizer=optimizer)
    # The per-datum loss is mean ‖r‖²/(2σ²) + const; its gradient plus w·θ vanishes at
    # (XᵀX/(Nσ²) + w I) θ = Xᵀy/(Nσ²).
    gram = inputs.T @ inputs / (NUM_DATA * NOISE_SD**2)
    ridge = torch.linalg.solve(
        gram + decay * torch.eye(3, dtype=torch.float64),
        inputs.T @ targets / (NUM_DATA * NOISE_SD**2),
    )
    torch.testing.assert_close(posterior.mean, ridge, rtol=1e-6, atol=1e-8)


def test_adamw_weight_decay_is_decoupled() -> None:
    """Without gradients, ``adamw`` shrinks θ by exactly (1 − lr·w) per step."""
    problem = Problem(
        forward=lambda params, inputs: torch.zeros(inputs.shape[0], 1, dtype=params.dtype),
        log_likelihood=lambda outputs, targets: torch.zeros(outputs.shape[0]),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], 1, 1),
        log_prior=lambda params: params.new_zeros(()),
        prior_precision=torch.zeros(2),
        num_data=4,
        dimension=2,
        param_names=("theta",),
        param_shapes=((2,),),
        init_params=lambda generator: torch.zeros(2),
    )
    optimizer = {"name": "adamw", "lr": 0.1, "weight_decay": 0.5}
    spec = METHODS.get("mle").spec.model_validate(
        {"engine": "mle", "epochs": 7, "batch_size": None, "optimizer": optimizer}
    )
    engine = METHODS.get("mle").builder()(problem, Tempering(1.0, 4), spec)
    start = torch.tensor([1.0, -2.0], dtype=torch.float64)
    data = (torch.zeros(4, 1), torch.zeros(4))
    result = fit(engine, start, *data, torch.Generator())
    torch.testing.assert_close(result.posterior.mean, start * (1 - 0.1 * 0.5) ** 7)


@pytest.mark.parametrize("kind", SCHEDULES)
def test_schedules_start_at_lr_and_end_at_the_final_fraction(kind: str) -> None:
    """Every schedule starts at lr, never rises, and ends at lr · final_fraction."""
    schedule = build_schedule(0.1, ScheduleSpec(kind=kind, final_fraction=0.01), 100)
    values = [
        float(schedule(step)) if callable(schedule) else schedule for step in range(0, 120, 10)
    ]
    assert values[0] == pytest.approx(0.1)
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(values))
    final = 0.1 if kind == "constant" else 0.001
    assert values[10] == pytest.approx(final) and values[11] == pytest.approx(final)
    if kind == "cosine":
        assert values[5] == pytest.approx(0.001 + 0.099 * 0.5 * (1 + math.cos(math.pi / 2)))


def test_momentum_with_adam_is_a_spec_error() -> None:
    """torchopt's adam has no momentum: asking for one is an error, not silently ignored."""
    with pytest.raises(pydantic.ValidationError, match="momentum applies to sgd only"):
        METHODS.get("map").spec.model_validate(
            {"engine": "map", "optimizer": {"name": "adam", "momentum": 0.9}}
        )
