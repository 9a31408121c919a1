"""The Fisher and dense Laplace engines against closed forms, and their refusals.

For linear regression with a Gaussian likelihood the GGN and the Hessian are the exact
``XᵀX/σ²``, so the dense GGN and Hessian Laplace approximations are the exact posterior.
The empirical Fisher at the mode is ``Σᵢ rᵢ² xᵢxᵢᵀ/σ⁴`` with residuals ``rᵢ``: it
estimates ``XᵀX/σ²`` (``E rᵢ² = σ²``) and is checked exactly against that formula, and
loosely against the posterior.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from bayesflow.engines.base import DENSE_DIMENSION_LIMIT
from bayesflow.engines.fit import fit
from bayesflow.errors import StageError
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import (
    NOISE_SD,
    PRIOR_VARIANCE,
    WARM_AND_COLD,
    Exact,
    Regression,
    exact,
    run,
)

DENSE = ["laplace_dense_fisher", "laplace_dense_ggn", "laplace_dense_hessian"]


def exact_with_fisher(
    regression: Regression, temperature: float, convention: str
) -> tuple[Exact, Tensor]:
    """The exact posterior and the tempered precision built on the empirical Fisher."""
    _, inputs, targets = regression
    target = exact(inputs, targets, temperature, convention)
    residuals = targets - inputs @ target.mean
    fisher = (inputs * residuals.unsqueeze(-1) ** 2).T @ inputs / NOISE_SD**4
    prior = torch.eye(3, dtype=inputs.dtype) / PRIOR_VARIANCE
    if convention == "posterior":
        return target, (prior + fisher) / temperature
    return target, prior + fisher / temperature


# The closed-form check of the dense GGN and Hessian Laplaces is a row of test_closed_form.CLOSED_FORM.


@pytest.mark.parametrize(("temperature", "convention"), WARM_AND_COLD)
@pytest.mark.parametrize("name", ["laplace_diag_fisher", "laplace_dense_fisher"])
def test_fisher_laplace_uses_the_empirical_fisher(
    name: str, regression: Regression, temperature: float, convention: str
) -> None:
    """The Fisher Laplace precision is ``Σᵢ rᵢ²xᵢxᵢᵀ/σ⁴`` plus the prior, tempered."""
    target, precision = exact_with_fisher(regression, temperature, convention)
    posterior = run(name, regression, temperature, convention, target.mean, batch_size=64)
    if name == "laplace_diag_fisher":
        assert posterior.var is not None
        torch.testing.assert_close(posterior.var, 1 / precision.diagonal(), rtol=1e-10, atol=0)
        approximate = posterior.var
        expected = target.mean_field_var
    else:
        assert posterior.cov is not None
        torch.testing.assert_close(posterior.cov, torch.linalg.inv(precision), rtol=1e-10, atol=0)
        approximate = posterior.cov.diagonal()
        expected = target.marginal_var
    # With N = 200 the empirical Fisher's diagonal is within about 25% of XᵀX/σ² here
    # (its relative sd is √(6/N) ≈ 17% per entry for Gaussian inputs).
    torch.testing.assert_close(approximate, expected, rtol=0.3, atol=0)


@pytest.mark.parametrize("name", DENSE)
def test_dense_laplace_at_zero_temperature_is_a_point_mass(
    name: str, regression: Regression
) -> None:
    """At T = 0 the covariance is zero and every sample is the mode."""
    target = exact(regression[1], regression[2], 1.0, "posterior")
    posterior = run(name, regression, 0.0, "posterior", target.mean)
    assert posterior.cov is not None and not posterior.cov.any()
    samples = posterior.sample(4, torch.Generator().manual_seed(0))
    assert torch.equal(samples, target.mean.expand(4, 3))


@pytest.mark.parametrize("name", [*DENSE, "vi_dense", "ekf_dense_fisher"])
def test_dense_methods_refuse_large_models(name: str) -> None:
    """A model above the dense limit is refused with the limit and the alternatives named."""
    problem = build_problem(linear(DENSE_DIMENSION_LIMIT, 1), gaussian(), diag_normal(), 10)
    spec = METHODS.get(name).spec.model_validate({"engine": name})
    with pytest.raises(StageError) as error:
        METHODS.get(name).builder()(problem, Tempering(1.0, 10), spec)
    message = str(error.value)
    assert f"has {DENSE_DIMENSION_LIMIT + 1:,} parameters" in message
    assert f"d ≤ {DENSE_DIMENSION_LIMIT:,}" in message and "parameters: [...]" in message
    assert "_diag" in message


def test_hessian_laplace_away_from_a_mode_is_refused() -> None:
    """An indefinite Hessian (not at a mode) is an error that suggests what to do."""
    problem = build_problem(
        mlp(2, 3, hidden=[5], activation="tanh"), categorical(), diag_normal(1.0), 24
    )
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(24, 2, generator=generator)
    targets = torch.randint(0, 3, (24,), generator=generator)
    spec = METHODS.get("laplace_dense_hessian").spec.model_validate(
        {"engine": "laplace_dense_hessian", "batch_size": None}
    )
    engine = METHODS.get("laplace_dense_hessian").builder()(problem, Tempering(1.0, 24), spec)
    start = problem.init_params(torch.Generator().manual_seed(1))
    with pytest.raises(StageError, match="not positive definite.*Fit the `from` method longer"):
        fit(engine, start, inputs, targets, generator)


def test_laplace_methods_need_a_mode_in_the_spec() -> None:
    """Every Laplace method's traits say it needs a mode (``from:``) and shares a curvature."""
    needing = {method.name for method in METHODS if method.traits.needs_mode}
    assert needing == {name for name in METHODS.names() if name.startswith("laplace")}
    assert len(needing) == 7  # diag and dense (5), KFAC (2)
    assert all(METHODS.get(name).traits.curvature for name in needing)
