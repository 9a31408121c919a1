"""The strength λ of the Laplace-as-prior update: λ = 1 is the update as it was, and on a
linear-Gaussian model (where the diagonal Laplace is exact) it equals the batch posterior;
λ scales the carried precision as the closed-form recursion says. The single-episode
baseline fits each episode alone."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.continual import fit_continual
from bayesflow.data import sklearn_digits
from bayesflow.errors import SpecError
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering

WORKFLOW = Path(__file__).parents[1] / "workflows" / "continual.yaml"
NOISE_SD, PRIOR_VARIANCE, PER_EPISODE, EPISODES = 0.5, 2.0, 8, 3


def map_config(**values):
    base = {"engine": "map", "continual": "laplace_prior", "epochs": 1, "batch_size": 64,
            "optimizer": {"name": "sgd", "lr": 0.05}}
    return METHODS.get("map").spec.model_validate({**base, **values})


def test_strength_without_laplace_prior_is_a_located_spec_error() -> None:
    with pytest.raises(SpecError) as info:
        bayesflow.load(WORKFLOW, ["methods.online_sgd.laplace_strength=10"])
    assert any("methods.online_sgd.laplace_strength" in p and "continual: laplace_prior" in p
               for p in info.value.problems)


def test_strength_one_is_the_update_as_it_was_on_digits() -> None:
    """λ = 1 and no λ run the very same computation: equal bit for bit."""
    data = sklearn_digits(episodes=2)
    tensors = (torch.as_tensor(data.x_train, dtype=torch.float32), torch.as_tensor(data.y_train),
               torch.as_tensor(data.x_test, dtype=torch.float32), torch.as_tensor(data.y_test))
    problem = build_problem(mlp(64, 10, hidden=[8]), categorical(), diag_normal(0.5), len(data.y_train))
    results = []
    for strength in (None, 1.0):
        torch.manual_seed(0)
        results.append(fit_continual(problem, map_config(laplace_strength=strength), Tempering(1.0, problem.num_data),
                                     tensors, (data.episode_train, data.episode_test),
                                     torch.Generator().manual_seed(0)))
    (first, traces, _), (second, again, _) = results
    assert torch.equal(first.mean, second.mean) and torch.equal(first.var, second.var)
    assert traces == again


def orthogonal_episodes() -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor], list[torch.Tensor]]:
    """Episodes of a 3-weight linear regression whose inputs have orthogonal columns
    (XₖᵀXₖ diagonal): the diagonal GGN is the exact Hessian, so the Laplace is exact."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    xs, ys = [], []
    for episode in range(EPISODES):
        basis, _ = torch.linalg.qr(torch.randn(PER_EPISODE, 3, generator=generator, dtype=torch.float64))
        inputs = basis * torch.tensor([1.0 + episode, 2.0, 0.5 + episode], dtype=torch.float64)
        xs.append(inputs)
        ys.append(inputs @ weights + NOISE_SD * torch.randn(PER_EPISODE, generator=generator, dtype=torch.float64))
    x, y = torch.cat(xs), torch.cat(ys)
    return (x, y, x, y), xs, ys


@lru_cache(maxsize=3)
def run_linear(strength: float | None, protocol: str = "laplace_prior") -> tuple:
    tensors, xs, ys = orthogonal_episodes()
    problem = build_problem(linear(3, 1, bias=False).double(), gaussian(NOISE_SD), diag_normal(PRIOR_VARIANCE),
                            EPISODES * PER_EPISODE)
    episodes = np.repeat(np.arange(EPISODES), PER_EPISODE)
    config = map_config(continual=protocol, laplace_strength=strength, epochs=1500, batch_size=None, optimizer={"name": "sgd", "lr": 0.1})
    posterior, _, _ = fit_continual(problem, config, Tempering(1.0, problem.num_data), tensors,
                                    (episodes, episodes), torch.Generator().manual_seed(0))
    return posterior, xs, ys


@pytest.mark.slow
def test_strength_one_is_the_batch_posterior_on_a_linear_gaussian_model() -> None:
    """Sequential updating with λ = 1 where the Laplace is exact: the batch posterior
    N(Λ⁻¹ Xᵀy/σ², Λ⁻¹), Λ = I/σ₀² + XᵀX/σ² (diagonal here)."""
    posterior, xs, ys = run_linear(1.0)
    x, y = torch.cat(xs), torch.cat(ys)
    precision = torch.eye(3, dtype=torch.float64) / PRIOR_VARIANCE + x.T @ x / NOISE_SD**2
    assert float((precision - torch.diag(precision.diagonal())).abs().max()) < 1e-12
    mean = torch.linalg.solve(precision, x.T @ y / NOISE_SD**2)
    torch.testing.assert_close(posterior.var, 1 / precision.diagonal(), rtol=1e-10, atol=0)
    torch.testing.assert_close(posterior.mean, mean, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_strength_scales_the_carried_precision() -> None:
    """λ = 3: Pₖ = Pₖ₋₁ + λ Gₖ and each episode's MAP under N(mₖ₋₁, Pₖ₋₁⁻¹) is
    mₖ = (Pₖ₋₁ + Gₖ)⁻¹ (Pₖ₋₁ mₖ₋₁ + Xₖᵀyₖ/σ²); the final variance is 1/P."""
    strength = 3.0
    posterior, xs, ys = run_linear(strength)
    precision = torch.full((3,), 1 / PRIOR_VARIANCE, dtype=torch.float64)
    mean = torch.zeros(3, dtype=torch.float64)
    for x, y in zip(xs, ys):
        curvature = (x**2).sum(0) / NOISE_SD**2
        mean = (precision * mean + x.T @ y / NOISE_SD**2) / (precision + curvature)
        precision = precision + strength * curvature
    torch.testing.assert_close(posterior.var, 1 / precision, rtol=1e-10, atol=0)
    torch.testing.assert_close(posterior.mean, mean, rtol=1e-8, atol=1e-10)
    unit, _, _ = run_linear(1.0)
    assert not torch.allclose(unit.mean, posterior.mean, rtol=1e-4)  # λ moved the later modes


@pytest.mark.slow
def test_single_fits_the_last_episode_alone() -> None:
    """`continual: single`: the last episode's MAP under the original prior alone,
    (I/σ₀² + XₖᵀXₖ/σ²)⁻¹ Xₖᵀyₖ/σ², whatever came before."""
    posterior, xs, ys = run_linear(None, "single")
    x, y = xs[-1], ys[-1]
    precision = torch.eye(3, dtype=torch.float64) / PRIOR_VARIANCE + x.T @ x / NOISE_SD**2
    torch.testing.assert_close(posterior.mean, torch.linalg.solve(precision, x.T @ y / NOISE_SD**2),
                               rtol=1e-8, atol=1e-10)
