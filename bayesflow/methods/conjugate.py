"""The exact tempered posterior of Bayesian linear regression (``conjugate_linear``).

A linear model ``f(x; θ) = Wx + b`` with a Gaussian likelihood of known noise ``σ`` and a
Gaussian prior ``N(0, diag(1/p))`` has a Gaussian posterior in closed form (the conjugate
case; e.g. Bishop, 2006, Section 3.3). With the full data X (N × d, a column of ones for
the intercept) and targets y, and the temperature convention's prior weight c (1 when the
whole posterior is tempered, T when only the likelihood is; :mod:`bayesflow.temperature`)::

    Λ = XᵀX / σ² + c · diag(p)                 (full-data precision, untempered)
    μ = Λ⁻¹ Xᵀy / σ²
    p_T(θ | D) = N(μ, T · Λ⁻¹)

so with the whole posterior tempered (c = 1) the mean is the Bayes posterior mean at every
T and the covariance scales with T; with only the likelihood tempered (c = T) the
covariance is ``(XᵀX/(σ²T) + diag(p))⁻¹`` and the mean moves with T.

The engine computes it without knowing the model's algebra: the log posterior of such a
model is exactly quadratic in θ, so one Newton step from any starting point θ₀ lands on its
mode, ``μ = θ₀ + Λ⁻¹ ∇(N·f)(θ₀)``, and Λ is the generalised Gauss-Newton matrix plus the
prior precision, which for a model linear in θ with a Gaussian likelihood is the exact
Hessian (:mod:`bayesflow.engines.curvature`). One full-batch pass; T = 0 gives the point
mass at μ. On any other model the same step is a Gauss-Newton step, not the posterior:
the traits restrict the method to a ``linear`` model, a ``gaussian`` likelihood and a
Gaussian (or flat) prior, and the spec check rejects other pairings at validate.

Its purpose is a reference: ``evaluate.reference: <this method>`` measures every other
method's mean and variances against the exact posterior.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from bayesflow.errors import StageError
from bayesflow.methods.base import PREDICTION_DESCRIPTION, Method, MethodBase, Prediction, Traits

if TYPE_CHECKING:
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "ConjugateLinearSpec", "ConjugateState", "build"]

NAME = "conjugate_linear"


class ConjugateLinearSpec(MethodBase):
    """The exact tempered posterior of linear regression with a Gaussian prior (closed form)."""

    engine: Literal["conjugate_linear"] = Field(description="Registry name of the engine.")
    # For a model linear in θ the two predictives are the same distribution.
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


def build(problem: Problem, tempering: Tempering, config: ConjugateLinearSpec) -> Engine:
    """One full-batch Newton step to the exact posterior; see the module docstring.

    Args:
        problem: a linear model with a gaussian likelihood (the spec checks enforce it).
        tempering: T scales the covariance; the convention sets the prior weight c.
        config: the method's spec (``prediction`` is read by the evaluate stage).

    Raises:
        StageError: when the model has more parameters than a dense covariance allows.
    """
    import torch
    from torch.func import grad

    from bayesflow.engines.base import Engine, Posterior, check_dense_dimension, dense_inverse
    from bayesflow.engines.curvature import dense_ggn, log_likelihood_gradient

    check_dense_dimension(NAME, problem, "laplace_diag_ggn")
    temperature, prior_weight = tempering.temperature, tempering.prior_weight
    prior_gradient = grad(problem.log_prior)

    def init(params: Tensor, generator: torch.Generator) -> ConjugateState:
        return ConjugateState(params.detach().clone(), None, 0)

    def update(state: ConjugateState, batch: Batch) -> tuple[ConjugateState, dict[str, Tensor]]:
        # A batch smaller than the data (the engine asks for one full batch) is scaled up
        # to N examples, so the step still targets the full-data posterior.
        scale = problem.num_data / batch[0].shape[0]
        start = state.params
        precision = scale * dense_ggn(problem, start, batch) + prior_weight * torch.diag(
            problem.prior_precision.to(start)
        )
        slope = scale * log_likelihood_gradient(problem, start, batch)
        slope = slope + prior_weight * prior_gradient(start)
        mean = start + dense_inverse(NAME, precision) @ slope
        with torch.no_grad():
            value = problem.log_posterior(mean, batch, prior_weight)
        return ConjugateState(mean.detach(), precision.detach(), state.step + 1), {
            "loss": -value, "log_posterior": value,
        }

    def posterior(state: ConjugateState) -> Posterior:
        if state.precision is None:
            raise StageError(f"{NAME} has no posterior yet: run its one update (fit) first")
        return Posterior(mean=state.params, cov=temperature * dense_inverse(NAME, state.precision))

    return Engine(init, update, posterior, 1, None)


class ConjugateState(NamedTuple):
    """The state of the closed-form fit.

    Attributes:
        params: the posterior mean μ after the update (the starting point before it).
        precision: the full-data precision Λ (d, d), untempered; None before the update.
        step: updates taken.
    """

    params: Tensor
    precision: Tensor | None
    step: int


METHODS = (
    Method(
        NAME, ConjugateLinearSpec,
        Traits(
            posterior="gaussian",
            tasks=frozenset({"regression"}),
            models=frozenset({"linear"}),
            priors=frozenset({"diag_normal", "he_normal", "none"}),
        ),
        build, label="exact",
    ),
)
