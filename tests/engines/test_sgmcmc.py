"""The SG-MCMC samplers and the deep ensemble: √T, T = 0, schedules.

The closed-form checks of every sampler are rows of :mod:`test_closed_form`; the shared machinery
(chains, schedules, collection) is exercised here through every sampler.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from bayesflow.engines.fit import fit
from bayesflow.engines.sgmcmc import build_step_size
from bayesflow.methods import METHODS
from bayesflow.methods.base import SamplerScheduleSpec
from bayesflow.temperature import Tempering
from tests.engines.helpers import (
    NUM_DATA,
    SAMPLER_CONFIGS,
    Regression,
    exact,
    run,
    sample_standard_gaussian,
    standard_gaussian,
)

CONFIGS = SAMPLER_CONFIGS
SAMPLERS = list(CONFIGS)
# The closed-form checks of the samplers are rows of test_closed_form.CLOSED_FORM.


@pytest.mark.parametrize("temperature", [1.0, 0.25])
@pytest.mark.parametrize("name", SAMPLERS)
def test_standard_deviation_is_root_temperature(name: str, temperature: float) -> None:
    """On a 1-D standard Gaussian the samples have sd √T and mean 0."""
    config = {**CONFIGS[name], "epochs": 400, "burn_in": 100, "chains": 512}
    samples = sample_standard_gaussian(name, temperature, **config)
    # Over seeds 0-7 the worst sd error was 3.7% and the worst |mean| 0.055 (sgnht, whose
    # single thermostat per 1-D chain fluctuates most).
    assert abs(samples.std().item() / temperature**0.5 - 1) < 0.06
    assert abs(samples.mean().item()) < 0.1 * temperature**0.5


@pytest.mark.parametrize("name", ["sghmc", "sgnht", "baoa"])
def test_momenta_have_the_kinetic_temperature(name: str) -> None:
    """The state exposes momenta (K, d) whose mean square is 𝒯 = T / N at stationarity."""
    temperature = 0.25
    config = {**CONFIGS.get(name, {"lr": 0.05, "alpha": 2.0}), "chains": 512, "epochs": 1}
    spec = METHODS.get(name).spec.model_validate({"engine": name, **config})
    engine = METHODS.get(name).builder()(standard_gaussian(), Tempering(temperature, 1), spec)
    state = engine.init(torch.zeros(1), torch.Generator().manual_seed(0))
    batch = (torch.zeros(1, 1), torch.zeros(1))
    for _ in range(200):
        state, aux = engine.update(state, batch)
    assert state.momenta.shape == (512, 1)
    assert "log_posterior" in aux and aux["log_posterior"].shape == ()
    # The mean of 512 independent χ²₁ · 𝒯 draws is within 13% of 𝒯 with probability 0.997.
    assert abs((state.momenta**2).mean().item() / temperature - 1) < 0.13


def test_sgld_at_zero_temperature_is_gradient_descent(regression: Regression) -> None:
    """At T = 0 SGLD takes exactly the steps of ``map`` with plain SGD at the same lr."""
    problem = regression[0]
    start = problem.init_params(torch.Generator().manual_seed(0))
    sgld = run("sgld", regression, 0.0, "posterior", start, lr=0.3, epochs=20, keep="last")
    optimizer = {"name": "sgd", "lr": 0.3}
    mode = run("map", regression, 0.0, "posterior", start, epochs=20, optimizer=optimizer)
    assert sgld.samples is not None
    torch.testing.assert_close(sgld.samples[0], mode.mean, rtol=1e-12, atol=1e-12)


def test_sgnht_at_zero_temperature_is_thermostatted_heavy_ball(regression: Regression) -> None:
    """At T = 0 SGNHT is heavy-ball ascent whose friction ξ grows with the kinetic energy."""
    problem, inputs, targets = regression
    step_size, friction, steps = 0.05, 0.5, 30
    start = problem.init_params(torch.Generator().manual_seed(0))
    config = {"lr": step_size, "alpha": friction, "epochs": steps}
    samples = run("sgnht", regression, 0.0, "posterior", start, **config).samples
    params, momenta, thermostat, expected = start.clone(), torch.zeros_like(start), friction, []
    for _ in range(steps):
        grad = torch.func.grad(problem.log_posterior)(params, (inputs, targets))
        params, momenta, thermostat = (
            params + step_size * momenta,
            momenta + step_size * grad - step_size * thermostat * momenta,
            thermostat + step_size * (momenta**2).mean().item(),
        )
        expected.append(params)
    torch.testing.assert_close(samples, torch.stack(expected), rtol=1e-12, atol=1e-12)


def test_baoa_at_zero_temperature_is_damped_leapfrog(regression: Regression) -> None:
    """At T = 0 BAOA is the noise-free B, A, damped O, A sequence."""
    problem, inputs, targets = regression
    step_size, friction, steps = 0.1, 2.0, 30
    start = problem.init_params(torch.Generator().manual_seed(0))
    config = {"lr": step_size, "alpha": friction, "epochs": steps}
    samples = run("baoa", regression, 0.0, "posterior", start, **config).samples
    params, momenta, expected = start.clone(), torch.zeros_like(start), []
    for _ in range(steps):
        momenta = momenta + step_size * torch.func.grad(problem.log_posterior)(
            params, (inputs, targets)
        )
        params = params + 0.5 * step_size * momenta
        momenta = math.exp(-friction * step_size) * momenta
        params = params + 0.5 * step_size * momenta
        expected.append(params)
    torch.testing.assert_close(samples, torch.stack(expected), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sgld", "sghmc", "sgnht", "baoa"])
def test_zero_temperature_reaches_the_mode(name: str, regression: Regression) -> None:
    """At T = 0 every sampler's chains settle at the mode (they are optimisers)."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    config = {"lr": 0.2, "epochs": 300, "chains": 4, "keep": "last"}
    if name != "sgld":
        config["alpha"] = 2.0
    samples = run(name, regression, 0.0, "posterior", **config).samples
    assert samples is not None
    torch.testing.assert_close(samples, target.mean.expand(4, 3), rtol=0, atol=1e-8)


def test_step_size_schedules() -> None:
    """Constant, polynomially decaying and cyclical cosine step sizes, with exploration."""
    constant = build_step_size(0.1, SamplerScheduleSpec(kind="constant"), 100)
    assert constant(0) == constant(99) == (0.1, False)
    decaying = build_step_size(
        0.1, SamplerScheduleSpec(kind="decaying", decay_steps=10, power=1.0), 100
    )
    assert decaying(0) == (0.1, False) and decaying(10) == pytest.approx((0.05, False))
    cyclical = build_step_size(
        0.1, SamplerScheduleSpec(kind="cyclical", cycles=4, exploration=0.5), 100
    )
    sizes = [cyclical(step)[0] for step in range(100)]
    assert sizes[0] == sizes[25] == sizes[75] == pytest.approx(0.1)
    assert sizes[12] < 0.1 and sizes[24] < 0.001
    assert sizes[:25] == sorted(sizes[:25], reverse=True)
    exploring = [cyclical(step)[1] for step in range(100)]
    assert exploring[:13] == [True] * 13 and exploring[13:25] == [False] * 12


def test_cyclical_exploration_keeps_no_samples(regression: Regression) -> None:
    """Samples are kept only in the sampling stage of each cycle, after burn-in."""
    schedule = {"kind": "cyclical", "cycles": 2, "exploration": 0.5}
    config = {"lr": 0.05, "epochs": 40, "burn_in": 5, "chains": 2, "schedule": schedule}
    samples = run("sgld", regression, 1.0, "posterior", **config).samples
    assert samples is not None
    # Steps 1-40 (step t uses the schedule at t − 1): cycles of 20, the first 10 explore;
    # kept steps are 11-20 and 31-40, all past the burn-in of 5.
    assert samples.shape == (2 * 20, 3)


@pytest.mark.parametrize(
    ("name", "config"),
    [("sgld", {"lr": 1.0, "beta": 3.0}), ("sghmc", {"lr": 1.0, "alpha": 0.1, "beta": 1.0})],
)
def test_negative_noise_variance_is_refused(
    name: str, config: dict[str, Any], regression: Regression
) -> None:
    """A β too large for the step size would need a negative noise variance."""
    spec = METHODS.get(name).spec.model_validate({"engine": name, **config})
    with pytest.raises(ValueError, match="noise variance .* is negative"):
        METHODS.get(name).builder()(regression[0], Tempering(1.0, NUM_DATA), spec)


def test_deep_ensemble_starts_where_parallel_sghmc_does(regression: Regression) -> None:
    """Under one seed, ensemble member k starts exactly where SGHMC chain k does."""
    problem = regression[0]
    tempering = Tempering(0.0, NUM_DATA)
    specs = {
        "deep_ensemble": {"engine": "deep_ensemble", "members": 5},
        "sghmc": {"engine": "sghmc", "chains": 5},
    }
    ensemble, sghmc = (
        METHODS.get(name).builder()(problem, tempering, METHODS.get(name).spec.model_validate(values))
        for name, values in specs.items()
    )
    start = torch.zeros(3, dtype=torch.float64)
    members = ensemble.init(start, torch.Generator().manual_seed(7)).params
    chains = sghmc.init(start, torch.Generator().manual_seed(7)).params
    assert members.shape == (5, 3) and torch.equal(members, chains)
    assert torch.unique(members, dim=0).shape[0] == 5


def test_deep_ensemble_equals_zero_temperature_parallel_sghmc(regression: Regression) -> None:
    """Run to convergence from the same starts, both give K copies of the mode."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    ensemble = run(
        "deep_ensemble",
        regression,
        1.0,
        "posterior",
        seed=3,
        members=4,
        epochs=200,
        optimizer={"name": "sgd", "lr": 0.5, "momentum": 0.5},
    ).samples
    sghmc = run(
        "sghmc",
        regression,
        0.0,
        "posterior",
        seed=3,
        chains=4,
        keep="last",
        lr=0.2,
        alpha=2.0,
        epochs=300,
    ).samples
    assert ensemble is not None and sghmc is not None
    torch.testing.assert_close(ensemble, sghmc, rtol=0, atol=1e-8)
    torch.testing.assert_close(ensemble, target.mean.expand(4, 3), rtol=0, atol=1e-8)


def test_deep_ensemble_members_are_independent_fits(regression: Regression) -> None:
    """Each member follows exactly the path ``map`` takes from the member's start."""
    problem = regression[0]
    optimizer = {"name": "adam", "lr": 0.05, "schedule": {"kind": "cosine"}}
    spec = METHODS.get("deep_ensemble").spec.model_validate(
        {
            "engine": "deep_ensemble",
            "members": 3,
            "epochs": 15,
            "batch_size": None,
            "optimizer": optimizer,
        }
    )
    engine = METHODS.get("deep_ensemble").builder()(problem, Tempering(1.0, NUM_DATA), spec)
    generator = torch.Generator().manual_seed(1)
    start = problem.init_params(torch.Generator().manual_seed(2))
    result = fit(engine, start, regression[1], regression[2], generator)
    members = result.posterior.samples
    assert members is not None
    for member in range(3):
        initial = engine.init(start, torch.Generator().manual_seed(1)).params[member]
        alone = run("map", regression, 1.0, "posterior", initial, epochs=15, optimizer=optimizer)
        torch.testing.assert_close(members[member], alone.mean, rtol=1e-10, atol=1e-12)
