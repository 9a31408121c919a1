"""Dense Hessian Laplace approximation (``laplace_dense_hessian``), small models.

The textbook Laplace approximation (MacKay, 1992; Tierney & Kadane, 1986): around a mode
θ* (the mean of the MAP or MLE method named by ``from:``) the log target is expanded to
second order with the exact Hessian of the negative log likelihood (as in the
posteriors library's ``laplace.dense_hessian``)::

    H = −∇² Σᵢ log p(yᵢ|xᵢ,θ) at θ*          (forward-over-reverse AD)
    Λ = H + c · diag(prior_precision)
    q(θ) = N(θ*, T · Λ⁻¹)

H is positive semi-definite only at a minimum of the negative log likelihood; away from
a mode (or at a saddle) Λ may be indefinite, and the engine then says so and suggests
the GGN, which is positive semi-definite everywhere. The prior enters through its
diagonal precision, as in every Laplace engine. The covariance is d × d: models above
:data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.

Temperature: the tempered target's precision is ``Λ / T`` with the prior weight ``c`` of
the convention, so the covariance is ``T · Λ⁻¹``; T = 0 is a point mass (``cov = 0``).
"""

from __future__ import annotations

from bayesflow.engines.base import Engine, Problem
from bayesflow.engines.curvature import dense_hessian
from bayesflow.engines.laplace import build_laplace
from bayesflow.methods.laplace import LaplaceDenseHessianSpec
from bayesflow.temperature import Tempering

__all__ = ["build"]


def build(problem: Problem, tempering: Tempering, config: LaplaceDenseHessianSpec) -> Engine:
    """Dense Hessian Laplace ``N(θ*, T · (−∇² Σᵢ log p(yᵢ|xᵢ,θ*) + c·diag(prior_precision))⁻¹)``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (the minibatch size of the curvature pass).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    return build_laplace(
        "laplace_dense_hessian",
        problem,
        tempering,
        config,
        dense_hessian,
        diagonal="laplace_diag_ggn",
    )
