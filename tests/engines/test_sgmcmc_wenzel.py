"""``sgmcmc_wenzel``: the tempered posterior in closed form, T̂ under M, M = I, T = 0.

The problem is the regression of :mod:`tests.engines.helpers` with its third input
replaced by an intercept: ``y = w₁x₁ + w₂x₂ + b``, a linear model with two parameter
tensors (``weight`` (1, 2) and ``bias`` (1,)), so the layer-wise mass is not trivially
1. Its exact posterior is :func:`~tests.engines.helpers.exact` on the design [x₁, x₂, 1].
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.engines.fit import fit
from bayesflow.likelihoods import gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import ChainTempering, Tempering
from tests.engines.helpers import (
    COLD,
    NOISE_SD,
    NUM_DATA,
    PRIOR_VARIANCE,
    Regression,
    exact,
    make_regression,
)

NAME = "sgmcmc_wenzel"
# εα = 0.2 (the paper's momentum decay 0.8); ε·√(H/M) ≤ 0.4 on this problem. The paper's
# schedule: 4 cosine cycles of 250 steps; burn-in spans the first two (the end of a cycle
# barely moves the chain, so a shorter burn-in leaves the start's transient in the samples).
CYCLICAL = {"kind": "cyclical", "cycles": 4}
CONSTANT = {"kind": "constant"}
CONFIG: dict[str, Any] = {
    "lr": 0.2, "alpha": 1.0, "epochs": 1000, "burn_in": 500, "chains": 64, "schedule": CYCLICAL
}


@pytest.fixture(scope="module")
def layered() -> Regression:
    """The regression with an intercept: problem, inputs (N, 2), targets (N,)."""
    _, inputs, targets = make_regression()
    problem = build_problem(
        linear(2, 1, bias=True).double(), gaussian(NOISE_SD), diag_normal(PRIOR_VARIANCE), NUM_DATA
    )
    return problem, inputs[:, :2], targets


def design(inputs: torch.Tensor) -> torch.Tensor:
    """[x₁, x₂, 1]: the flat parameters are (w₁, w₂, b) in this order."""
    return torch.cat([inputs, torch.ones_like(inputs[:, :1])], 1)


def engine(layered: Regression, temperature: float, tempering: Any = None, **config: Any) -> Any:
    """The engine on the layered regression, full batch unless ``config`` says otherwise."""
    spec = METHODS.get(NAME).spec.model_validate({"engine": NAME, "batch_size": None, **config})
    tempering = tempering or Tempering(temperature, NUM_DATA)
    return METHODS.get(NAME).builder()(layered[0], tempering, spec)


def sample(layered: Regression, temperature: float, seed: int = 0, **config: Any) -> Any:
    """A fit from zeros: its result (final state and posterior)."""
    start = torch.zeros(3, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    return fit(engine(layered, temperature, **config), start, *layered[1:], generator)


@pytest.mark.parametrize("temperature", [1.0, COLD])
def test_recovers_the_tempered_posterior(layered: Regression, temperature: float) -> None:
    """Full batch, the samples have the exact tempered posterior's mean and covariance."""
    result = sample(layered, temperature, **CONFIG)
    target = exact(design(layered[1]), layered[2], temperature, "posterior")
    samples = result.posterior.samples
    assert samples is not None and samples.shape == (64 * 500, 3)
    # Whitened by the exact covariance, the samples should be N(0, I).
    root = torch.linalg.cholesky(target.cov)
    white = torch.linalg.solve_triangular(root, (samples - target.mean).T, upper=False).T
    # Over seeds 0-7 at both temperatures (measured) the worst whitened mean was 0.099
    # and the worst covariance entry off by 0.091 (with 512 chains: 0.017, so this is
    # Monte Carlo error: the small steps near each cycle's end give correlated samples).
    assert white.mean(0).abs().max() < 0.15
    assert (torch.cov(white.T) - torch.eye(3, dtype=white.dtype)).abs().max() < 0.15
    # The mass is layer-wise and not trivial: one scalar per tensor, the smallest 1.
    mass = result.state.mass
    assert torch.equal(mass[:, 0], mass[:, 1]) and (mass.min(1).values == 1).all()
    assert (mass[:, :2] != mass[:, 2:]).all()


def test_kinetic_temperature_under_the_mass_is_the_temperature(layered: Regression) -> None:
    """Time-averaged, mean(m²/M)·N of each tensor is T (to the integrator's known bias)."""
    step_size, friction, temperature = 0.1, 1.0, COLD
    config = {**CONFIG, "lr": step_size, "alpha": friction, "burn_in": 100, "schedule": CONSTANT}
    sampler = engine(layered, temperature, **config)
    start = exact(design(layered[1]), layered[2], temperature, "posterior").mean
    state = sampler.init(start.expand(64, 3), torch.Generator().manual_seed(0))
    kinetic, squares = [], []
    for step in range(400):
        state, aux = sampler.update(state, tuple(layered[1:]))
        if step >= 100:
            kinetic.append(aux["kinetic_temperature"])
            squares.append((state.momenta**2 / state.mass).mean(0) * NUM_DATA)
    assert not torch.equal(state.mass, torch.ones_like(state.mass))
    # Symplectic Euler's momenta have variance 𝒯M/(1 − εα/2) (the O-step's stationary
    # variance 2εα𝒯M / (1 − (1 − εα)²)); 300 steps × 64 chains: over seeds 0-7 the
    # corrected ratio was off by at most 3.1% overall and 5.7% for one tensor (measured).
    corrected = temperature / (1 - step_size * friction / 2)
    assert abs(torch.stack(kinetic).mean().item() / corrected - 1) < 0.06
    by_coordinate = torch.stack(squares).mean(0)
    for tensor in (by_coordinate[:2].mean(), by_coordinate[2]):
        assert abs(tensor.item() / corrected - 1) < 0.1


def test_without_preconditioner_is_the_plain_update(layered: Regression) -> None:
    """With M = I the steps are those of symplectic-Euler SGHMC, noise draws included."""
    problem, inputs, targets = layered
    step_size, friction, steps, temperature = 0.1, 0.5, 10, 1.0
    config = {
        "lr": step_size, "alpha": friction, "epochs": steps, "schedule": CONSTANT,
        "preconditioner": "none",
    }
    start = problem.init_params(torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(1)
    result = fit(engine(layered, temperature, **config), start, inputs, targets, generator)
    per_datum = temperature / NUM_DATA
    draws = torch.Generator().manual_seed(1)

    def noise(variance: float) -> torch.Tensor:
        return torch.randn((1, 3), generator=draws, dtype=torch.float64) * math.sqrt(variance)

    params, momenta, expected = start.unsqueeze(0), noise(per_datum), []
    for _ in range(steps):
        grad = torch.func.grad(problem.log_posterior)(params[0], (inputs, targets))
        momenta = (1 - step_size * friction) * momenta + step_size * grad
        momenta = momenta + noise(2 * step_size * friction * per_datum)
        params = params + step_size * momenta
        expected.append(params[0])
    torch.testing.assert_close(result.posterior.samples, torch.stack(expected), rtol=1e-12, atol=1e-14)
    assert torch.equal(result.state.mass, torch.ones_like(result.state.mass))


def test_layerwise_mass_follows_the_running_mean_square(layered: Regression) -> None:
    """At T = 0, a hand-written loop: v per tensor, M refreshed during burn-in, m rescaled."""
    problem, inputs, targets = layered
    step_size, friction, steps, burn_in, decay = 0.1, 0.5, 30, 12, 0.9
    config = {
        "lr": step_size, "alpha": friction, "epochs": steps, "burn_in": burn_in,
        "preconditioner_decay": decay, "mass_updates": "burn_in", "schedule": CONSTANT,
    }
    start = problem.init_params(torch.Generator().manual_seed(0))
    result = fit(engine(layered, 0.0, **config), start, inputs, targets, torch.Generator())
    params, momenta = start.clone(), torch.zeros(3, dtype=torch.float64)
    mass = torch.ones(3, dtype=torch.float64)
    second_moment, expected = torch.zeros(2, dtype=torch.float64), []
    for step in range(steps):
        grad = torch.func.grad(problem.log_posterior)(params, (inputs, targets))
        squares = torch.stack([(grad[:2] ** 2).mean(), grad[2] ** 2])
        second_moment = squares if step == 0 else decay * second_moment + (1 - decay) * squares
        if step < burn_in:
            root = (second_moment + 1e-7).sqrt()
            new_mass = (root / root.min())[[0, 0, 1]]
            momenta, mass = momenta * (new_mass / mass).sqrt(), new_mass
        momenta = (1 - step_size * friction) * momenta + step_size * grad
        params = params + step_size * momenta / mass
        expected.append(params)
    samples = result.posterior.samples
    assert samples is not None
    torch.testing.assert_close(samples, torch.stack(expected[burn_in:]), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(result.state.mass[0], mass)


def test_zero_temperature_is_deterministic(layered: Regression) -> None:
    """At T = 0 nothing is drawn: two seeds give the same path, bit for bit."""
    config = {**CONFIG, "epochs": 50, "burn_in": 10, "chains": 1}
    first = sample(layered, 0.0, seed=0, **config).posterior.samples
    second = sample(layered, 0.0, seed=1, **config).posterior.samples
    assert first is not None and second is not None and torch.equal(first, second)


# Cycles of 80 / 4 = 20 steps start at steps 0, 20, 40 and 60; burn-in is steps 0-9.
@pytest.mark.parametrize(
    ("mass_updates", "kind", "burn_in", "changes"),
    [
        ("burn_in", "cyclical", 10, set(range(10))),
        ("cycle_starts", "cyclical", 10, set(range(10)) | {20, 40, 60}),
        ("cycle_starts", "constant", 0, {0}),
    ],
)
def test_mass_is_fixed_while_samples_are_collected(
    layered: Regression, mass_updates: str, kind: str, burn_in: int, changes: set[int]
) -> None:
    """M changes only in burn-in, at the first step and, with ``cycle_starts``, at cycle starts."""
    schedule = {"kind": kind, "cycles": 4, "exploration": 0.25}
    config = {
        "lr": 0.1, "epochs": 20, "batch_size": 50, "burn_in": burn_in, "chains": 2,
        "schedule": schedule, "mass_updates": mass_updates,
    }
    sampler = engine(layered, 1.0, **config)
    state = sampler.init(torch.zeros(3, dtype=torch.float64), torch.Generator().manual_seed(0))
    changed = set()
    for step in range(80):
        index = torch.arange(step * 50, (step + 1) * 50) % NUM_DATA
        previous = state.mass
        state, _ = sampler.update(state, (layered[1][index], layered[2][index]))
        if not torch.equal(state.mass, previous):
            changed.add(step)
    assert changed == changes


def test_per_chain_temperatures_equal_the_scalar_engine(layered: Regression) -> None:
    """Every chain of a ChainTempering at one T takes the scalar engine's steps."""
    config = {"lr": 0.1, "epochs": 20, "batch_size": 50, "chains": 3, "burn_in": 5}
    start = layered[0].init_params(torch.Generator().manual_seed(0))
    posteriors: list[Posterior] = []
    for tempering in (Tempering(0.3, NUM_DATA), ChainTempering((0.3, 0.3, 0.3), NUM_DATA)):
        sampler = engine(layered, 0.3, tempering, **config)
        generator = torch.Generator().manual_seed(1)
        posteriors.append(fit(sampler, start, *layered[1:], generator).posterior)
    torch.testing.assert_close(posteriors[1].samples, posteriors[0].samples)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"lr": 0.5, "alpha": 3.0}, "momentum decay 1 − lr·alpha is negative"),
        ({"mass_updates": "burn_in"}, "never estimates the mass; set burn_in > 0"),
    ],
)
def test_spec_refuses_settings_that_cannot_work(config: dict[str, Any], message: str) -> None:
    """A negative momentum decay, or a mass that would never be estimated, is a spec error."""
    with pytest.raises(ValueError, match=message):
        METHODS.get(NAME).spec.model_validate({"engine": NAME, **config})


def test_module_imports_without_torch() -> None:
    """The method module (spec, traits, State, build) imports without loading torch."""
    code = (
        "import sys, bayesflow.methods.sgmcmc_wenzel; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
