"""Every engine against the tempered posterior of Bayesian linear regression, known in closed form.

The problem and its exact posterior ``N(m, Λ⁻¹)`` are in :mod:`tests.engines.helpers`.
``CLOSED_FORM`` is one table over the methods: a row names a method, its settings, where
it starts, the temperatures (each row at least T = 1 and a cold T) and what it must match
within which tolerance: point estimates the mean ``m`` with zero variance; the diagonal
GGN Laplace, mean-field VI and the minibatch diagonal EKF the variance ``1 / diag(Λ)``;
the dense methods, the KFAC GGN of a one-output linear model, the conjugate update and
the samplers ``Λ⁻¹`` or its diagonal. A new method joins by adding a row, or a line of
``ELSEWHERE`` saying which module checks it against what. Properties that are not one
comparison with the closed form (T = 0, √T, least squares) follow the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from bayesflow.methods import METHODS
from tests.engines.helpers import (
    CASES,
    COLD,
    SAMPLER_CONFIGS,
    SGHMC_CONFIG,
    VI_CONFIG,
    WARM_AND_COLD,
    Exact,
    Regression,
    exact,
    run,
    run_cached,
    sample_standard_gaussian,
)

Tolerance = float | None | Callable[[Exact], float]


@dataclass(frozen=True)
class Row:
    """One method's closed-form check.

    ``start``: ``"zeros"``, ``"mode"`` (the exact mean) or a constant for every coordinate.
    ``mean``: ``("close", rtol, atol)`` (``torch.testing.assert_close``; None, None for
    its defaults) or ``("sd", k, "mean_field_var" | "marginal_var")``: at most ``k``
    standard deviations off; None: not checked. ``spread``: ``(field, target, rtol, atol)``
    with ``field`` one of ``var``, ``cov``, ``samples`` (their variance) and ``target`` an
    :class:`Exact` property, or ``zero`` (exactly zero); an ``atol`` may be a function of
    the exact posterior. ``draws``: the number of samples a sampler keeps.
    """

    method: str
    cases: list[tuple[float, str]]
    spread: tuple[str, str, Tolerance, Tolerance]
    mean: tuple[Any, ...] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    start: str | float = "zeros"
    draws: int | None = None
    correlation_atol: float | None = None
    shared: bool = False  # run through run_cached: other tests reuse the fit
    slow: bool = False


CLOSED_FORM: dict[str, Row] = {
    # map converges to the tempered posterior's mode with zero variance.
    "map": Row("map", CASES, ("var", "zero", None, None), ("close", 1e-8, 1e-10),
               {"epochs": 200, "optimizer": {"name": "sgd", "lr": 0.5}}),
    # The diagonal GGN Laplace around the mode has variance exactly 1 / diag(Λ).
    "laplace_diag_ggn": Row("laplace_diag_ggn", CASES, ("var", "mean_field_var", 1e-10, 0),
                            ("close", None, None), start="mode"),
    # For linear regression with a Gaussian likelihood the GGN and the Hessian are the exact
    # XᵀX/σ²: around the mode the dense Laplace covariances are exactly Λ⁻¹.
    "laplace_dense_ggn": Row("laplace_dense_ggn", CASES, ("cov", "cov", 1e-10, 0), ("close", None, None),
                             {"batch_size": 64}, start="mode"),
    "laplace_dense_hessian": Row("laplace_dense_hessian", CASES, ("cov", "cov", 1e-10, 0), ("close", None, None),
                                 {"batch_size": 64}, start="mode"),
    # For a one-output linear model with a Gaussian likelihood, G ⊗ A = (N/σ²)(XᵀX/N) is the
    # exact GGN: the KFAC GGN Laplace is the exact posterior.
    "laplace_kfac_ggn": Row("laplace_kfac_ggn", CASES, ("var", "marginal_var", 1e-10, 1e-14), start="mode"),
    # The conjugate formulas, from any starting point (one Newton step).
    "conjugate_linear": Row("conjugate_linear", CASES, ("cov", "cov", 1e-9, 1e-12), ("close", 1e-9, 1e-10)),
    "conjugate_linear[from_5]": Row("conjugate_linear", CASES, ("cov", "cov", 1e-9, 1e-12), ("close", 1e-9, 1e-10),
                                    start=5.0),
    # Mean-field VI finds the mean and the mean-field variance 1 / diag(Λ).
    "vi_diag": Row("vi_diag", CASES, ("var", "mean_field_var", 0.05, 0), ("sd", 0.05, "mean_field_var"), VI_CONFIG),
    # Dense VI with stick-the-landing finds Λ⁻¹. Measured: within 0.14% of Λ⁻¹ at T = 0.1 and
    # 4e-7 at T = 1 (the cosine schedule's last steps average out the remaining noise of
    # the 8-sample gradient).
    "vi_dense": Row("vi_dense", WARM_AND_COLD,
                    ("cov", "cov", 0, lambda target: 0.01 * float(target.marginal_var.sqrt().min()) ** 2),
                    ("sd", 0.01, "marginal_var"), VI_CONFIG),
    # One pass of the dense EKF from the prior mean is the Kalman filter: the exact posterior,
    # whatever the minibatches.
    "ekf_dense_fisher[batch_16]": Row("ekf_dense_fisher", WARM_AND_COLD, ("cov", "cov", 1e-10, 0),
                                      ("close", 1e-10, 1e-12), {"batch_size": 16}),
    "ekf_dense_fisher[full_batch]": Row("ekf_dense_fisher", WARM_AND_COLD, ("cov", "cov", 1e-10, 0),
                                        ("close", 1e-10, 1e-12), {"batch_size": None}),
    # With minibatches the diagonal EKF's variance is exactly 1 / diag(Λ); its mean drops
    # each step's correlations, so it is only near the posterior mean.
    "ekf_diag_fisher": Row("ekf_diag_fisher", WARM_AND_COLD, ("var", "mean_field_var", 1e-10, 0),
                           ("sd", 2, "marginal_var"), {"batch_size": 32}),
    # ε = 0.05 with α = 2 inflates the variance of a unit-precision target by 2.6% (the
    # stationary covariance of the discrete update, from the Lyapunov equation); the Monte
    # Carlo error of 64 chains × 800 correlated draws is up to about 9% (measured). The
    # likelihood convention at T = 1 is the posterior one.
    "sghmc": Row("sghmc", [c for c in CASES if c != (1.0, "likelihood")], ("samples", "marginal_var", 0.15, 0),
                 ("sd", 0.15, "marginal_var"), SGHMC_CONFIG, draws=64 * 800, shared=True),
    # 128 chains × 350 draws with autocorrelation times of 20-80 steps leave a Monte Carlo
    # error of the variance of about 5%; over seeds 0-6 the worst was 12% (sgnht), and the
    # mean's worst 0.09 sd.
    **{
        name: Row(name, WARM_AND_COLD, ("samples", "marginal_var", 0.2, 0), ("sd", 0.15, "marginal_var"),
                  config, draws=128 * 350)
        for name, config in SAMPLER_CONFIGS.items()
    },
    # Over seeds 0-5 at both temperatures (measured): the mean within 0.12 sd, the variances
    # within 22%, the correlations within 0.12 of the exact ones.
    "nuts": Row("nuts", WARM_AND_COLD, ("samples", "marginal_var", 0.3, 0), ("sd", 0.25, "marginal_var"),
                {"warmup": 200, "num_samples": 400}, start="mode", draws=400, correlation_atol=0.2, slow=True),
}

# Registered methods without a row, and where their closed form is checked instead.
ELSEWHERE: dict[str, str] = {
    "base": "no fit: the model's own weights (test_base_model)",
    "mle": "ignores the prior: least squares, below",
    "deep_ensemble": "equals zero-temperature parallel SGHMC (test_sgmcmc)",
    "laplace_diag_fisher": "the empirical Fisher, not Λ: its own formula (test_laplace)",
    "laplace_dense_fisher": "the empirical Fisher, not Λ: its own formula (test_laplace)",
    "laplace_kfac_fisher": "the empirical Fisher, not Λ: the Kronecker formula (test_laplace_kfac)",
    "sgmcmc_wenzel": "a layered regression with an intercept (test_sgmcmc_wenzel)",
    "ivon": "its step equals the ivon-opt package's; on the regression the mean within 0.3 sd and "
            "the variance within 25% of mean-field 1/diag(Λ) at T = 1 and 1/4 (test_ivon)",
    "swag": "moments equal numpy's over the recorded SGD iterates; draws have the stated "
            "covariance at T = 0.5; T = 0 is the SWA mean (test_swag)",
    "mc_dropout": "no temperature: MAP's fit with dropout on; its K passes equal the peft model's own in train "
                  "mode, p -> 0 equals MAP (tests/llm/test_mc_dropout)",
}


def test_every_method_has_a_row_or_says_where_it_is_checked() -> None:
    """The table follows the registry: each method has a row or an ``ELSEWHERE`` line,
    and each row runs at T = 1 and at least one cold temperature."""
    names = set(METHODS.names())
    tabled = {row.method for row in CLOSED_FORM.values()}
    assert not (names - tabled - set(ELSEWHERE)), "add a CLOSED_FORM row or an ELSEWHERE line"
    assert not (tabled | set(ELSEWHERE)) - names, "rows name no registered method"
    assert not tabled & set(ELSEWHERE)
    for key, row in CLOSED_FORM.items():
        temperatures = {temperature for temperature, _ in row.cases}
        assert 1.0 in temperatures and min(temperatures) < 1.0, key


def _tolerance(value: Tolerance, target: Exact) -> float | None:
    return value(target) if callable(value) else value


TABLE = [
    pytest.param(key, temperature, convention, id=f"{key}-{temperature}-{convention}",
                 marks=[pytest.mark.slow] if row.slow else [])
    for key, row in CLOSED_FORM.items()
    for temperature, convention in row.cases
]


@pytest.mark.parametrize(("key", "temperature", "convention"), TABLE)
def test_recovers_the_closed_form(regression: Regression, key: str, temperature: float, convention: str) -> None:
    """The method's posterior matches the exact tempered posterior within its row's tolerance."""
    row = CLOSED_FORM[key]
    target = exact(regression[1], regression[2], temperature, convention)
    if row.shared:
        assert row.start == "zeros"
        posterior = run_cached(row.method, temperature, convention, **row.config)
    else:
        start = None
        if row.start == "mode":
            start = target.mean
        elif not isinstance(row.start, str):
            start = torch.full((3,), row.start, dtype=torch.float64)
        posterior = run(row.method, regression, temperature, convention, start, **row.config)
    samples = posterior.samples
    if row.draws is not None:
        assert samples is not None and samples.shape == (row.draws, 3)
        mean = samples.mean(0)
    else:
        assert posterior.mean is not None
        mean = posterior.mean
    if row.mean is not None and row.mean[0] == "close":
        torch.testing.assert_close(mean, target.mean, rtol=row.mean[1], atol=row.mean[2])
    elif row.mean is not None:
        _, limit, scale = row.mean
        assert ((mean - target.mean).abs() / getattr(target, scale).sqrt()).max() < limit
    where, what, rtol, atol = row.spread
    if where == "cov":
        assert posterior.var is None and posterior.cov is not None
        value = posterior.cov
    elif where == "var":
        assert posterior.var is not None
        value = posterior.var
    else:
        assert samples is not None
        value = samples.var(0)
    if what == "zero":
        assert torch.equal(value, torch.zeros_like(value))
    else:
        expected = getattr(target, what)
        torch.testing.assert_close(value, expected, rtol=_tolerance(rtol, target), atol=_tolerance(atol, target))
    if row.correlation_atol is not None:
        assert samples is not None
        sd = target.marginal_var.sqrt()
        expected = target.cov / (sd.unsqueeze(0) * sd.unsqueeze(1))
        torch.testing.assert_close(torch.corrcoef(samples.T), expected, rtol=0, atol=row.correlation_atol)


def test_mle_ignores_the_prior(regression: Any) -> None:
    """``mle`` converges to the least-squares solution at any temperature."""
    _, inputs, targets = regression
    least_squares = torch.linalg.lstsq(inputs, targets.unsqueeze(-1)).solution.squeeze(-1)
    optimizer = {"name": "sgd", "lr": 0.5}
    posterior = run("mle", regression, COLD, "likelihood", epochs=200, optimizer=optimizer)
    torch.testing.assert_close(posterior.mean, least_squares, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_laplace_at_zero_temperature_is_a_point_mass(regression: Any, convention: str) -> None:
    """At T = 0 the Laplace variance is zero."""
    posterior = run("laplace_diag_ggn", regression, 0.0, convention)
    assert torch.equal(posterior.var, torch.zeros(3, dtype=torch.float64))


def test_vi_at_zero_temperature_collapses_onto_the_mode(regression: Any) -> None:
    """At T = 0 ``vi_diag`` finds the mode and shrinks its variance far below the T = 1 one."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    posterior = run("vi_diag", regression, 0.0, "posterior", **VI_CONFIG)
    sd = target.mean_field_var.sqrt()
    assert ((posterior.mean - target.mean).abs() / sd).max() < 0.05
    assert (posterior.var < 0.05 * target.mean_field_var).all()


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
