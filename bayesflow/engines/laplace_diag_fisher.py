"""Diagonal empirical-Fisher Laplace approximation (``laplace_diag_fisher``).

Around a mode θ* (the mean of the MAP or MLE method named by ``from:``), the curvature of
the negative log likelihood is replaced by the diagonal of the empirical Fisher, the sum
of squared per-example gradients (as in the posteriors library's ``laplace.diag_fisher``;
Daxberger et al., 2021, https://arxiv.org/abs/2106.14806)::

    F = Σᵢ gᵢ ⊙ gᵢ,   gᵢ = ∇θ log p(yᵢ|xᵢ,θ*)
    Λ = F + c · prior_precision
    q(θ) = N(θ*, diag(T / Λ))

Unlike the GGN, F uses the observed targets instead of the model's predictive: it needs
no output Hessian, but at a mode it only estimates the Fisher (for a well-specified
model, E[gᵢgᵢᵀ] is the Fisher) and can be far off for a misspecified one (Kunstner et
al., 2019, https://arxiv.org/abs/1905.12558).

Temperature: as for every Laplace engine (:mod:`bayesflow.engines.laplace`), the
variance is ``T / Λ`` with the prior weight ``c`` of the convention; T = 0 is a point mass.
"""

from __future__ import annotations

from bayesflow.engines.base import Engine, Problem
from bayesflow.engines.curvature import diagonal_fisher
from bayesflow.engines.laplace import build_laplace
from bayesflow.methods.laplace import LaplaceDiagFisherSpec
from bayesflow.temperature import Tempering

__all__ = ["build"]


def build(problem: Problem, tempering: Tempering, config: LaplaceDiagFisherSpec) -> Engine:
    """Diagonal empirical-Fisher Laplace ``N(θ*, diag(T / (Σᵢ gᵢ² + c·prior_precision)))``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (the minibatch size of the curvature pass).
    """
    return build_laplace("laplace_diag_fisher", problem, tempering, config, diagonal_fisher)
