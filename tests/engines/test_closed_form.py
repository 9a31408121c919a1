"""Each engine recovers a tempered posterior known in closed form.

Bayesian linear regression ``y = Xw + N(0, σ²)`` with prior ``w ~ N(0, σ₀² I)`` has the
tempered posterior ``N(m, Λ⁻¹)``: with the whole posterior tempered
``Λ = (I/σ₀² + XᵀX/σ²) / T``; with only the likelihood tempered
``Λ = I/σ₀² + XᵀX/(σ² T)``. Point estimates find ``m``; the diagonal Laplace and
mean-field VI optimum have variance ``1 / diag(Λ)``; SGHMC samples ``diag(Λ⁻¹)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch
from torch import Tensor

from bayesflow.engines import ENGINES
from bayesflow.engines.base import Posterior, Problem
from bayesflow.engines.fit import fit
from bayesflow.likelihoods import gaussian
from bayesflow.models import linear
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.spec.methods import ENGINE_SPECS
from bayesflow.temperature import Tempering

NUM_DATA, NOISE_SD, PRIOR_VARIANCE = 200, 0.5, 2.0
COLD = 0.1
CASES = [(1.0, "posterior"), (COLD, "posterior"), (1.0, "likelihood"), (COLD, "likelihood")]


class Exact(NamedTuple):
    """The exact tempered posterior N(mean, inverse(precision))."""

    mean: Tensor
    precision: Tensor

    @property
    def mean_field_var(self) -> Tensor:
        """``1 / diag(Λ)``: the variance of the diagonal Laplace and mean-field VI."""
        return 1 / self.precision.diagonal()

    @property
    def marginal_var(self) -> Tensor:
        """``diag(Λ⁻¹)``: the true marginal variances."""
        return torch.linalg.inv(self.precision).diagonal()


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Run on one thread: these tiny tensors are several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def regression() -> tuple[Problem, Tensor, Tensor]:
    """A float64 linear regression problem, its inputs (N, 3) and targets (N,)."""
    generator = torch.Generator().manual_seed(0)
    # Inputs of sd 0.5 make the per-datum precision XᵀX/(Nσ²) about the identity.
    inputs = 0.5 * torch.randn(NUM_DATA, 3, generator=generator, dtype=torch.float64)
    weights = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    targets = inputs @ weights + NOISE_SD * torch.randn(
        NUM_DATA, generator=generator, dtype=torch.float64
    )
    model = linear(3, 1, bias=False).double()
    problem = build_problem(model, gaussian(NOISE_SD), diag_normal(PRIOR_VARIANCE), NUM_DATA)
    return problem, inputs, targets


def exact(inputs: Tensor, targets: Tensor, temperature: float, convention: str) -> Exact:
    """The closed-form tempered posterior of the regression."""
    prior = torch.eye(3, dtype=inputs.dtype) / PRIOR_VARIANCE
    gram, moment = inputs.T @ inputs / NOISE_SD**2, inputs.T @ targets / NOISE_SD**2
    if convention == "posterior":
        precision = (prior + gram) / temperature
        return Exact(torch.linalg.solve(prior + gram, moment), precision)
    precision = prior + gram / temperature
    return Exact(torch.linalg.solve(precision, moment / temperature), precision)


def run(
    name: str,
    regression: Any,
    temperature: float,
    convention: str,
    params: Tensor | None = None,
    seed: int = 0,
    **config: Any,
) -> Posterior:
    """Fit engine ``name`` on the regression, full batch, from ``params`` (default zeros)."""
    problem, inputs, targets = regression
    spec = ENGINE_SPECS[name].model_validate({"engine": name, "batch_size": None, **config})
    tempering = Tempering(temperature, NUM_DATA, convention)  # type: ignore[arg-type]
    engine = ENGINES.get(name)(problem, tempering, spec)
    start = torch.zeros(problem.dimension, dtype=torch.float64) if params is None else params
    return fit(engine, start, inputs, targets, torch.Generator().manual_seed(seed)).posterior


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


@pytest.mark.parametrize(("temperature", "convention"), CASES)
def test_sghmc_samples_the_posterior(regression: Any, temperature: float, convention: str) -> None:
    """SGHMC's samples have the posterior's mean and marginal variances."""
    target = exact(regression[1], regression[2], temperature, convention)
    samples = run("sghmc", regression, temperature, convention, **SGHMC_CONFIG).samples
    assert samples is not None and samples.shape == (64 * 800, 3)
    sd = target.marginal_var.sqrt()
    assert ((samples.mean(0) - target.mean).abs() / sd).max() < 0.15
    # ε = 0.05 with α = 2 inflates the variance of a unit-precision target by 2.6% (the
    # stationary covariance of the discrete update, from the Lyapunov equation); the
    # Monte Carlo error of 64 chains × 800 correlated draws is up to about 9% (measured).
    torch.testing.assert_close(samples.var(0), target.marginal_var, rtol=0.15, atol=0)


def test_sghmc_cold_variance_is_temperature_times_warm(regression: Any) -> None:
    """Under the same seed, the cold chains' variance is exactly T times the warm ones'."""
    warm = run("sghmc", regression, 1.0, "posterior", **SGHMC_CONFIG).samples
    cold = run("sghmc", regression, COLD, "posterior", **SGHMC_CONFIG).samples
    assert warm is not None and cold is not None
    # The dynamics are linear, so once the start is forgotten cold = mode + √T (warm − mode).
    torch.testing.assert_close(
        cold.var(0) / warm.var(0), torch.full_like(warm[0], COLD), rtol=1e-3, atol=0
    )


def standard_gaussian() -> Problem:
    """The 1-D target log p(θ) = −θ²/2 with N = 1 and no data term."""
    return Problem(
        forward=lambda params, inputs: torch.zeros(inputs.shape[0], 1, dtype=params.dtype),
        log_likelihood=lambda outputs, targets: torch.zeros(outputs.shape[0]),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], 1, 1),
        log_prior=lambda params: -0.5 * (params**2).sum(-1),
        prior_precision=torch.ones(1),
        num_data=1,
        dimension=1,
        param_names=("theta",),
        param_shapes=((1,),),
        init_params=lambda generator: torch.randn(1, generator=generator),
    )


@pytest.mark.parametrize("temperature", [1.0, 0.25])
def test_sghmc_standard_deviation_is_root_temperature(temperature: float) -> None:
    """On a standard Gaussian target SGHMC's samples have sd √T."""
    problem = standard_gaussian()
    spec = ENGINE_SPECS["sghmc"].model_validate(
        {"engine": "sghmc", "lr": 0.05, "alpha": 2.0, "epochs": 2000, "burn_in": 200, "chains": 32}
    )
    engine = ENGINES.get("sghmc")(problem, Tempering(temperature, 1), spec)
    batch = (torch.zeros(1, 1), torch.zeros(1))
    result = fit(engine, torch.zeros(1), *batch, torch.Generator().manual_seed(0))
    samples = result.posterior.samples
    assert samples is not None
    # Measured over seeds: sd within 3% of √T (1.3% of it the step-size bias), mean within
    # 0.11 sd (the position's integrated autocorrelation time is about 2α/(ε·1) = 80 steps).
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
