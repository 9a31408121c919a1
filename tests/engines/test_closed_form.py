"""Each of the first engines recovers a tempered posterior known in closed form.

The problem and its exact posterior are in :mod:`tests.engines.helpers`. Point estimates
find the mean ``m``; the diagonal GGN Laplace and mean-field VI optimum have variance
``1 / diag(Λ)``; SGHMC samples ``diag(Λ⁻¹)``. The other engines have their own modules.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.engines.helpers import (
    CASES,
    COLD,
    exact,
    run,
    run_cached,
    sample_standard_gaussian,
)


@pytest.mark.parametrize(("temperature", "convention"), CASES)
def test_map_finds_the_mode(regression: Any, temperature: float, convention: str) -> None:
    """``map`` converges to the tempered posterior's mode with zero variance."""
    target = exact(regression[1], regression[2], temperature, convention)
    optimizer = {"name": "sgd", "lr": 0.5}
    posterior = run("map", regression, temperature, convention, epochs=200, optimizer=optimizer)
    torch.testing.assert_close(posterior.mean, target.mean, rtol=1e-8, atol=1e-10)
    assert torch.equal(posterior.var, torch.zeros(3, dtype=torch.float64))


def test_mle_ignores_the_prior(regression: Any) -> None:
    """``mle`` converges to the least-squares solution at any temperature."""
    _, inputs, targets = regression
    least_squares = torch.linalg.lstsq(inputs, targets.unsqueeze(-1)).solution.squeeze(-1)
    optimizer = {"name": "sgd", "lr": 0.5}
    posterior = run("mle", regression, COLD, "likelihood", epochs=200, optimizer=optimizer)
    torch.testing.assert_close(posterior.mean, least_squares, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(("temperature", "convention"), CASES)
def test_laplace_is_exact(regression: Any, temperature: float, convention: str) -> None:
    """The diagonal GGN Laplace around the mode has variance exactly ``1 / diag(Λ)``."""
    target = exact(regression[1], regression[2], temperature, convention)
    posterior = run("laplace_diag_ggn", regression, temperature, convention, target.mean)
    torch.testing.assert_close(posterior.mean, target.mean)
    torch.testing.assert_close(posterior.var, target.mean_field_var, rtol=1e-10, atol=0)


@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_laplace_at_zero_temperature_is_a_point_mass(regression: Any, convention: str) -> None:
    """At T = 0 the Laplace variance is zero."""
    posterior = run("laplace_diag_ggn", regression, 0.0, convention)
    assert torch.equal(posterior.var, torch.zeros(3, dtype=torch.float64))


VI_CONFIG = {
    "epochs": 400,
    "n_samples": 8,
    "init_log_sd": -3.5,
    "optimizer": {"lr": 0.05, "schedule": {"kind": "cosine", "final_fraction": 0.01}},
}


@pytest.mark.parametrize(("temperature", "convention"), CASES)
def test_vi_finds_the_mean_field_optimum(
    regression: Any, temperature: float, convention: str
) -> None:
    """``vi_diag`` finds the mean and the mean-field variance ``1 / diag(Λ)``."""
    target = exact(regression[1], regression[2], temperature, convention)
    posterior = run("vi_diag", regression, temperature, convention, **VI_CONFIG)
    sd = target.mean_field_var.sqrt()
    assert ((posterior.mean - target.mean).abs() / sd).max() < 0.05
    torch.testing.assert_close(posterior.var, target.mean_field_var, rtol=0.05, atol=0)


def test_vi_at_zero_temperature_collapses_onto_the_mode(regression: Any) -> None:
    """At T = 0 ``vi_diag`` finds the mode and shrinks its variance far below the T = 1 one."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    posterior = run("vi_diag", regression, 0.0, "posterior", **VI_CONFIG)
    sd = target.mean_field_var.sqrt()
    assert ((posterior.mean - target.mean).abs() / sd).max() < 0.05
    assert (posterior.var < 0.05 * target.mean_field_var).all()


SGHMC_CONFIG = {"lr": 0.05, "alpha": 2.0, "epochs": 1000, "burn_in": 200, "chains": 64}


# The likelihood convention at T = 1 is the posterior one; the shared SG-MCMC machinery
# is run under both conventions by the other samplers (test_sgmcmc).
@pytest.mark.parametrize(
    ("temperature", "convention"), [c for c in CASES if c != (1.0, "likelihood")]
)
def test_sghmc_samples_the_posterior(regression: Any, temperature: float, convention: str) -> None:
    """SGHMC's samples have the posterior's mean and marginal variances."""
    target = exact(regression[1], regression[2], temperature, convention)
    samples = run_cached("sghmc", temperature, convention, **SGHMC_CONFIG).samples
    assert samples is not None and samples.shape == (64 * 800, 3)
    sd = target.marginal_var.sqrt()
    assert ((samples.mean(0) - target.mean).abs() / sd).max() < 0.15
    # ε = 0.05 with α = 2 inflates the variance of a unit-precision target by 2.6% (the
    # stationary covariance of the discrete update, from the Lyapunov equation); the
    # Monte Carlo error of 64 chains × 800 correlated draws is up to about 9% (measured).
    torch.testing.assert_close(samples.var(0), target.marginal_var, rtol=0.15, atol=0)


def test_sghmc_cold_variance_is_temperature_times_warm(regression: Any) -> None:
    """Under the same seed, the cold chains' variance is exactly T times the warm ones'."""
    warm = run_cached("sghmc", 1.0, "posterior", **SGHMC_CONFIG).samples
    cold = run_cached("sghmc", COLD, "posterior", **SGHMC_CONFIG).samples
    assert warm is not None and cold is not None
    # The dynamics are linear, so once the start is forgotten cold = mode + √T (warm − mode).
    torch.testing.assert_close(
        cold.var(0) / warm.var(0), torch.full_like(warm[0], COLD), rtol=1e-3, atol=0
    )


@pytest.mark.parametrize("temperature", [1.0, 0.25])
def test_sghmc_standard_deviation_is_root_temperature(temperature: float) -> None:
    """On a standard Gaussian target SGHMC's samples have sd √T."""
    config = {"lr": 0.05, "alpha": 2.0, "epochs": 500, "burn_in": 200, "chains": 512}
    samples = sample_standard_gaussian("sghmc", temperature, **config)
    # The position's integrated autocorrelation time is about 2α/(ε·1) = 80 steps; over
    # seeds 0-5 (measured) the sd was within 3.2% of √T (1.3% of it the step-size bias)
    # and the mean within 0.04 sd.
    assert abs(samples.std().item() / temperature**0.5 - 1) < 0.06
    assert abs(samples.mean().item()) < 0.15 * temperature**0.5


def test_sghmc_at_zero_temperature_is_heavy_ball_ascent(regression: Any) -> None:
    """At T = 0 SGHMC is exactly heavy-ball momentum gradient ascent on f."""
    problem, inputs, targets = regression
    step_size, friction, steps = 0.05, 0.5, 30
    config = {"lr": step_size, "alpha": friction, "epochs": steps}
    start = problem.init_params(torch.Generator().manual_seed(0))
    samples = run("sghmc", regression, 0.0, "posterior", start, **config).samples
    params, momenta, expected = start.clone(), torch.zeros_like(start), []
    for _ in range(steps):
        grad = torch.func.grad(problem.log_posterior)(params, (inputs, targets))
        params, momenta = (
            params + step_size * momenta,
            momenta + step_size * grad - step_size * friction * momenta,
        )
        expected.append(params)
    torch.testing.assert_close(samples, torch.stack(expected), rtol=1e-12, atol=1e-12)
