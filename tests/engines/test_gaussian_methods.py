"""Full-covariance VI and the extended Kalman filters against the exact posterior.

For linear regression with a Gaussian likelihood the tempered posterior is Gaussian, so
dense VI with the stick-the-landing estimator converges to it exactly (its gradient
variance vanishes there), and the EKF with the expected Fisher is exactly a Kalman
filter: one pass over the data gives the exact posterior, whatever the minibatches.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.errors import StageError
from bayesflow.likelihoods import gaussian
from bayesflow.methods import METHODS
from bayesflow.methods.vi import DENSE, DIAGONAL, Family, cholesky_factor, entropy
from bayesflow.models import linear
from bayesflow.priors import diag_normal, none
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import (
    NOISE_SD,
    NUM_DATA,
    PRIOR_VARIANCE,
    WARM_AND_COLD,
    Regression,
    exact,
    run,
)

# The closed-form check of vi_dense is a row of test_closed_form.CLOSED_FORM.


# Both covariance families: the scale S is ρ (d,) for the diagonal one, A (d, d) for the
# dense one; the closed-form entropy Σ log diag L + const has gradient 1 on the entries of
# S that hold log diag L, and 0 elsewhere and in μ.
FAMILIES = [(DIAGONAL, (3,), torch.ones(3)), (DENSE, (3, 3), torch.eye(3))]


@pytest.mark.parametrize(("family", "shape", "expected"), FAMILIES, ids=["diagonal", "dense"])
def test_stick_the_landing_detaches_mean_and_scale(
    family: Family, shape: tuple[int, ...], expected: torch.Tensor
) -> None:
    """With draws held fixed, the STL entropy has no gradient in the mean or the scale."""
    mean = torch.randn(3, dtype=torch.float64, requires_grad=True)
    scale = (0.1 * torch.randn(shape, dtype=torch.float64)).requires_grad_()
    draws = torch.randn(5, 3, dtype=torch.float64)
    estimate = entropy(family, mean, scale, draws, stick_the_landing=True)
    assert estimate.requires_grad is False


@pytest.mark.parametrize(("family", "shape", "expected"), FAMILIES, ids=["diagonal", "dense"])
def test_stick_the_landing_is_unbiased(
    family: Family, shape: tuple[int, ...], expected: torch.Tensor
) -> None:
    """Through the draws, the STL gradient averages to the closed-form entropy gradient."""
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(3, generator=generator, dtype=torch.float64).requires_grad_()
    scale = 0.3 * torch.randn(shape, generator=generator, dtype=torch.float64)
    scale.requires_grad_()
    noise = torch.randn(200_000, 3, generator=generator, dtype=torch.float64)
    draws = mean + family.times_factor(scale, noise)
    entropy(family, mean, scale, draws, stick_the_landing=True).backward()
    assert mean.grad is not None and scale.grad is not None
    torch.testing.assert_close(mean.grad, torch.zeros(3, dtype=torch.float64), rtol=0, atol=0.02)
    torch.testing.assert_close(scale.grad, expected.double(), rtol=0, atol=0.02)


def test_closed_form_entropy_is_the_gaussian_entropy() -> None:
    """Without STL, both families give the entropy of N(μ, L Lᵀ), ½ log det(2πe L Lᵀ)."""
    generator = torch.Generator().manual_seed(0)
    factor = 0.3 * torch.randn(3, 3, generator=generator, dtype=torch.float64)
    lower = cholesky_factor(factor)
    mean, draws = torch.zeros(3, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64)
    exact = torch.distributions.MultivariateNormal(mean, scale_tril=lower).entropy()
    torch.testing.assert_close(entropy(DENSE, mean, factor, draws, False), exact)
    log_sd = factor.diagonal()
    exact = torch.distributions.Normal(mean, log_sd.exp()).entropy().sum()
    torch.testing.assert_close(entropy(DIAGONAL, mean, log_sd, draws, False), exact)


# The closed-form check of the dense EKF is a row of test_closed_form.CLOSED_FORM.


@pytest.mark.parametrize(("temperature", "convention"), WARM_AND_COLD)
def test_diagonal_ekf_is_exact_for_an_orthogonal_design(
    temperature: float, convention: str
) -> None:
    """When XᵀX is diagonal, one full-batch step of ``ekf_diag_fisher`` is exact."""
    generator = torch.Generator().manual_seed(1)
    basis, _ = torch.linalg.qr(torch.randn(NUM_DATA, 3, generator=generator, dtype=torch.float64))
    inputs = basis * torch.tensor([5.0, 7.0, 9.0], dtype=torch.float64)
    targets = inputs @ torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    targets = targets + NOISE_SD * torch.randn(NUM_DATA, generator=generator, dtype=torch.float64)
    model = linear(3, 1, bias=False).double()
    problem = build_problem(model, gaussian(NOISE_SD), diag_normal(PRIOR_VARIANCE), NUM_DATA)
    target = exact(inputs, targets, temperature, convention)
    posterior = run("ekf_diag_fisher", (problem, inputs, targets), temperature, convention)
    assert posterior.var is not None and posterior.mean is not None
    torch.testing.assert_close(posterior.mean, target.mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(posterior.var, target.marginal_var, rtol=1e-10, atol=0)


# The closed-form check of the minibatch diagonal EKF is a row of test_closed_form.CLOSED_FORM.


def test_empirical_fisher_ekf_step(regression: Regression) -> None:
    """One full-batch step with ``fisher: empirical`` adds ``Σᵢ gᵢgᵢᵀ`` to the precision."""
    _, inputs, targets = regression
    posterior = run("ekf_dense_fisher", regression, 1.0, "posterior", fisher="empirical")
    gradients = inputs * (targets / NOISE_SD**2).unsqueeze(-1)  # gᵢ at θ = 0
    precision = torch.eye(3, dtype=torch.float64) / PRIOR_VARIANCE + gradients.T @ gradients
    cov = torch.linalg.inv(precision)
    assert posterior.cov is not None and posterior.mean is not None
    torch.testing.assert_close(posterior.cov, cov, rtol=1e-10, atol=0)
    torch.testing.assert_close(posterior.mean, cov @ gradients.sum(0), rtol=1e-10, atol=1e-12)


def marginal_variances(posterior: Posterior) -> torch.Tensor:
    """The diagonal of a Gaussian posterior's covariance."""
    if posterior.var is not None:
        return posterior.var
    assert posterior.cov is not None
    return posterior.cov.diagonal()


@pytest.mark.parametrize("name", ["ekf_diag_fisher", "ekf_dense_fisher"])
def test_ekf_covariance_shrinks_with_data_and_decay_forgets(
    name: str, regression: Regression
) -> None:
    """Every update shrinks the covariance; a decay below 1 keeps it larger."""
    problem, inputs, targets = regression
    finals = []
    for decay in (1.0, 0.5):
        spec = METHODS.get(name).spec.model_validate({"engine": name, "decay": decay})
        engine = METHODS.get(name).builder()(problem, Tempering(1.0, NUM_DATA), spec)
        state = engine.init(torch.zeros(3, dtype=torch.float64), torch.Generator())
        history = [marginal_variances(engine.posterior(state))]
        for start in range(0, NUM_DATA, 50):
            state, _ = engine.update(
                state, (inputs[start : start + 50], targets[start : start + 50])
            )
            history.append(marginal_variances(engine.posterior(state)))
        if decay == 1.0:
            assert all((after < before).all() for before, after in itertools.pairwise(history))
        finals.append(history[-1])
    assert (finals[1] > finals[0]).all()


def test_ekf_needs_a_prior_or_an_initial_variance() -> None:
    """With a flat prior the filter has no starting variance: say to set init_variance."""
    problem = build_problem(linear(2, 1), gaussian(), none(), 10)
    spec = METHODS.get("ekf_diag_fisher").spec.model_validate({"engine": "ekf_diag_fisher"})
    engine = METHODS.get("ekf_diag_fisher").builder()(problem, Tempering(1.0, 10), spec)
    with pytest.raises(
        StageError, match="3 of 3 parameters have no prior precision.*init_variance"
    ):
        engine.init(torch.zeros(3), torch.Generator())
    spec = METHODS.get("ekf_diag_fisher").spec.model_validate(
        {"engine": "ekf_diag_fisher", "init_variance": 2.0}
    )
    state = METHODS.get("ekf_diag_fisher").builder()(problem, Tempering(1.0, 10), spec).init(
        torch.zeros(3), torch.Generator()
    )
    assert torch.equal(state.variance, torch.full((3,), 2.0))
