"""Dense empirical-Fisher Laplace approximation (``laplace_dense_fisher``), small models.

Around a mode θ* (the mean of the MAP or MLE method named by ``from:``), the Hessian of
the negative log likelihood is replaced by the empirical Fisher (as in the posteriors
library's ``laplace.dense_fisher``; Daxberger et al., 2021,
https://arxiv.org/abs/2106.14806)::

    F = Σᵢ gᵢ gᵢᵀ,   gᵢ = ∇θ log p(yᵢ|xᵢ,θ*)
    Λ = F + c · diag(prior_precision)
    q(θ) = N(θ*, T · Λ⁻¹)

F is positive semi-definite everywhere, so Λ is positive definite under a proper prior.
It estimates the Fisher from the observed targets (see :mod:`laplace_diag_fisher` for
when that is poor). The covariance is d × d: models above
:data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.

Temperature: the tempered target's precision is ``Λ / T`` with the prior weight ``c`` of
the convention, so the covariance is ``T · Λ⁻¹``; T = 0 is a point mass (``cov = 0``).
"""

from __future__ import annotations

from bayesflow.engines.base import Engine, Problem
from bayesflow.engines.curvature import dense_fisher
from bayesflow.engines.laplace import build_laplace
from bayesflow.methods.laplace import LaplaceDenseFisherSpec
from bayesflow.temperature import Tempering

__all__ = ["build"]


def build(problem: Problem, tempering: Tempering, config: LaplaceDenseFisherSpec) -> Engine:
    """Dense empirical-Fisher Laplace ``N(θ*, T · (Σᵢ gᵢgᵢᵀ + c·diag(prior_precision))⁻¹)``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (the minibatch size of the curvature pass).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    return build_laplace(
        "laplace_dense_fisher",
        problem,
        tempering,
        config,
        dense_fisher,
        diagonal="laplace_diag_fisher",
    )
