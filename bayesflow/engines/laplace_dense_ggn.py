"""Dense generalised Gauss-Newton Laplace approximation (``laplace_dense_ggn``), small models.

Around a mode θ* (the mean of the MAP or MLE method named by ``from:``), the Hessian of
the negative log likelihood is replaced by the generalised Gauss-Newton matrix (Martens,
2020, https://arxiv.org/abs/1412.1193; Immer et al., 2021,
https://arxiv.org/abs/2008.08400)::

    G = Σᵢ Jᵢᵀ Hᵢ Jᵢ,   Jᵢ = ∂ forward(θ*, xᵢ) / ∂θ,   Hᵢ = −∂² log p(yᵢ|oᵢ) / ∂oᵢ²
    Λ = G + c · diag(prior_precision)
    q(θ) = N(θ*, T · Λ⁻¹)

G is the Hessian of the network linearised at θ*, positive semi-definite everywhere, and
for the likelihoods here it is also the Fisher of the model's predictive; it pairs
naturally with ``prediction: linearized``. For a model linear in θ with a Gaussian
likelihood it is the exact Hessian, so the approximation is the exact posterior. The
covariance is d × d: models above :data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT`
parameters are refused.

Temperature: the tempered target's precision is ``Λ / T`` with the prior weight ``c`` of
the convention, so the covariance is ``T · Λ⁻¹``; T = 0 is a point mass (``cov = 0``).
"""

from __future__ import annotations

from bayesflow.engines.base import Engine, Problem
from bayesflow.engines.curvature import dense_ggn
from bayesflow.engines.laplace import build_laplace
from bayesflow.methods.laplace import LaplaceDenseGGNSpec
from bayesflow.temperature import Tempering

__all__ = ["build"]


def build(problem: Problem, tempering: Tempering, config: LaplaceDenseGGNSpec) -> Engine:
    """Dense GGN Laplace ``N(θ*, T · (Σᵢ JᵢᵀHᵢJᵢ + c·diag(prior_precision))⁻¹)``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (the minibatch size of the curvature pass).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    return build_laplace(
        "laplace_dense_ggn", problem, tempering, config, dense_ggn, diagonal="laplace_diag_ggn"
    )
