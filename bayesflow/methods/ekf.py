"""Online extended Kalman filters, diagonal (``ekf_diag_fisher``) or dense.

The filter of Ollivier (2018, https://arxiv.org/abs/1703.00209), as in the posteriors
library's ``ekf`` module: the parameters are the hidden state of a Kalman filter whose
observations are the minibatches. It keeps a Gaussian belief ``N(μ, V)`` in untempered
full-data units, starts from the prior and, for each minibatch B, takes one predict and
one update step (linearising the model at the current mean)::

    predict:  V ← V / decay + q
    update:   V ← (V⁻¹ + F_B)⁻¹,   μ ← μ + V g_B
              g_B = Σ_{i∈B} ∇θ log p(yᵢ|xᵢ,μ),   F_B = Σ_{i∈B} Fᵢ(μ)

with ``Fᵢ`` the Fisher of example i: ``fisher: expected`` uses ``Jᵢᵀ Hᵢ Jᵢ`` (Ollivier's
Fisher, which for the likelihoods here is the generalised Gauss-Newton matrix), and
``fisher: empirical`` uses ``gᵢ gᵢᵀ`` (as posteriors does); ``ekf_diag_fisher`` keeps
only the diagonals of V and F. The filter starts from ``N(θ₀, V₀)`` with θ₀ the
parameters given to ``init`` and ``V₀ = 1 / (c · prior_precision)`` (or
``init_variance``): the prior, centred at the starting point, which is exact when θ₀ is
the prior's mean (0) and keeps a network's initialisation otherwise (its all-zero mean
would have no useful gradient).

For a model linear in θ with a Gaussian likelihood, the expected Fisher is the exact
Hessian and the update is exactly the Kalman filter: one pass over the data from θ₀ = 0
with ``decay = 1`` and ``q = 0`` gives the exact posterior (with a dense covariance; the
diagonal one drops the correlations of each step). The update is also one step of online
natural-gradient ascent with step size V (Ollivier, 2018). With ``decay < 1`` or ``q > 0``
the filter forgets old batches, so several passes do not over-count the data.

Temperature: with the prior weight c of the convention, the filter's V is the covariance
of the target at T = 1 rescaled, so the reported posterior is ``N(μ, T · V)``; the mean
path does not depend on T (except through c), and T = 0 gives a point mass.

``ekf_dense_fisher`` keeps the d × d matrices whole (``V ← V / decay + q I`` in the
predict step). The Fisher is **added** to the precision, so the covariance shrinks as
data arrive (the posteriors library's ``ekf.dense_fisher`` 0.1.3 subtracts it, and its
covariance grows).
Each dense step inverts two d × d matrices, so models above
:data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field, PositiveFloat, PositiveInt

from bayesflow.errors import StageError
from bayesflow.methods.base import PREDICTION_DESCRIPTION, Method, MethodBase, Prediction, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import Tempering

__all__ = [
    "METHODS",
    "EKFBase",
    "EKFDenseSpec",
    "EKFDenseState",
    "EKFDiagSpec",
    "EKFDiagState",
    "build",
    "build_dense",
    "initial_variance",
    "step_loss",
]


class EKFBase(MethodBase):
    """Fields shared by the extended Kalman filters."""

    epochs: PositiveInt = Field(
        1, description="Passes over the training data (one pass is one Bayesian update)."
    )
    batch_size: PositiveInt | None = Field(
        128, description="Minibatch size of each filter step; null for full batch."
    )
    fisher: Literal["expected", "empirical"] = Field(
        "expected",
        description="Curvature of each update: `expected` is the Fisher of the model's "
        "predictive (Ollivier, 2018; exact Kalman filtering for a linear-Gaussian model); "
        "`empirical` is Σᵢ gᵢgᵢᵀ of the per-example gradients (as the posteriors library).",
    )
    decay: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Predict step: the covariance is divided by `decay` before each update "
        "(fading memory); 1 keeps the exact Bayesian update.",
    )
    transition_variance: float = Field(
        0.0,
        ge=0,
        description="Predict step: variance q added to every parameter before each update.",
    )
    init_variance: PositiveFloat | None = Field(
        None,
        description="Initial (untempered) variance of every parameter; null uses the prior's "
        "variance, the filter's starting belief.",
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class EKFDiagSpec(EKFBase):
    """Online extended Kalman filter with a diagonal covariance (``ekf_diag_fisher``)."""

    engine: Literal["ekf_diag_fisher"] = Field(description="Registry name of the engine.")


class EKFDenseSpec(EKFBase):
    """Online extended Kalman filter with a dense covariance (small models)."""

    engine: Literal["ekf_dense_fisher"] = Field(description="Registry name of the engine.")


def build(problem: Problem, tempering: Tempering, config: EKFDiagSpec) -> Engine:
    """Diagonal EKF over minibatches; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T scales the reported covariance; the convention sets the prior weight.
        config: the method's spec (passes, batch size, Fisher, decay, transition variance).
    """
    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.curvature import (
        diagonal_ggn,
        example_gradients,
        log_likelihood_gradient,
    )

    temperature = tempering.temperature

    def init(params: Tensor, generator: torch.Generator) -> EKFDiagState:
        # Deterministic: the generator is unused.
        mean = params.detach().clone()
        variance = initial_variance("ekf_diag_fisher", problem, tempering, config, mean)
        return EKFDiagState(mean, variance, 0)

    def update(state: EKFDiagState, batch: Batch) -> tuple[EKFDiagState, dict[str, Tensor]]:
        loss = step_loss(problem, tempering, state.mean, batch)
        predicted = state.variance / config.decay + config.transition_variance
        if config.fisher == "empirical":
            gradients = example_gradients(problem, state.mean, batch)
            gradient, fisher = gradients.sum(0), (gradients**2).sum(0)
        else:
            gradient = log_likelihood_gradient(problem, state.mean, batch)
            fisher = diagonal_ggn(problem, state.mean, batch)
        variance = 1 / (1 / predicted + fisher.detach())
        mean = state.mean + variance * gradient.detach()
        return EKFDiagState(mean, variance, state.step + 1), {"loss": loss}

    def posterior(state: EKFDiagState) -> Posterior:
        return Posterior(mean=state.mean, var=temperature * state.variance)

    return Engine(init, update, posterior, config.epochs, config.batch_size)


class EKFDiagState(NamedTuple):
    """The state of a diagonal EKF.

    Attributes:
        mean: μ (d,).
        variance: the diagonal of V (d,), untempered (the posterior reports T · V).
        step: update steps taken.
    """

    mean: Tensor
    variance: Tensor
    step: int


def build_dense(problem: Problem, tempering: Tempering, config: EKFDenseSpec) -> Engine:
    """Dense EKF over minibatches; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T scales the reported covariance; the convention sets the prior weight.
        config: the method's spec (passes, batch size, Fisher, decay, transition variance).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior, check_dense_dimension, dense_inverse
    from bayesflow.engines.curvature import dense_ggn, example_gradients, log_likelihood_gradient

    name = "ekf_dense_fisher"
    check_dense_dimension(name, problem, "ekf_diag_fisher")
    temperature = tempering.temperature

    def init(params: Tensor, generator: torch.Generator) -> EKFDenseState:
        # Deterministic: the generator is unused.
        mean = params.detach().clone()
        variance = initial_variance(name, problem, tempering, config, mean)
        return EKFDenseState(mean, torch.diag(variance), 0)

    def update(state: EKFDenseState, batch: Batch) -> tuple[EKFDenseState, dict[str, Tensor]]:
        loss = step_loss(problem, tempering, state.mean, batch)
        predicted = state.cov / config.decay
        if config.transition_variance > 0:
            predicted = predicted + config.transition_variance * torch.eye(
                predicted.shape[0], dtype=predicted.dtype, device=predicted.device
            )
        if config.fisher == "empirical":
            gradients = example_gradients(problem, state.mean, batch)
            gradient, fisher = gradients.sum(0), gradients.T @ gradients
        else:
            gradient = log_likelihood_gradient(problem, state.mean, batch)
            fisher = dense_ggn(problem, state.mean, batch)
        cov = dense_inverse(name, dense_inverse(name, predicted) + fisher.detach())
        mean = state.mean + cov @ gradient.detach()
        return EKFDenseState(mean, cov, state.step + 1), {"loss": loss}

    def posterior(state: EKFDenseState) -> Posterior:
        return Posterior(mean=state.mean, cov=temperature * state.cov)

    return Engine(init, update, posterior, config.epochs, config.batch_size)


class EKFDenseState(NamedTuple):
    """The state of a dense EKF.

    Attributes:
        mean: μ (d,).
        cov: V (d, d), untempered (the posterior reports T · V).
        step: update steps taken.
    """

    mean: Tensor
    cov: Tensor
    step: int


def initial_variance(
    name: str, problem: Problem, tempering: Tempering, config: EKFBase, like: Tensor
) -> Tensor:
    """``V₀`` (d,): ``init_variance``, or ``1 / (c · prior_precision)``.

    Raises:
        StageError: when some parameter has no prior precision and no ``init_variance``.
    """
    import torch

    if config.init_variance is not None:
        return torch.full_like(like, config.init_variance)
    precision = tempering.prior_weight * problem.prior_precision.to(like)
    if bool((precision <= 0).any()):
        count = int((precision <= 0).sum())
        raise StageError(
            f"{name}: {count} of {problem.dimension} parameters have no prior precision (a "
            "flat prior, or the likelihood convention at T = 0), so the filter would start "
            "from an infinite variance; set `init_variance` or use a proper prior"
        )
    return 1 / precision


def step_loss(problem: Problem, tempering: Tempering, mean: Tensor, batch: Batch) -> Tensor:
    """−f(μ; batch), the negative per-datum log posterior at the mean before the step."""
    import torch

    with torch.no_grad():
        return -problem.log_posterior(mean, batch, prior_weight=tempering.prior_weight)


METHODS = (
    Method("ekf_diag_fisher", EKFDiagSpec, Traits(posterior="gaussian", per_example_rows=True), build),
    Method("ekf_dense_fisher", EKFDenseSpec, Traits(posterior="gaussian", per_example_rows=True), build_dense),
)
