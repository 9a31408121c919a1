"""Online extended Kalman filter with a diagonal covariance (``ekf_diag_fisher``).

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
``fisher: empirical`` uses ``gᵢ gᵢᵀ`` (as posteriors does). This engine keeps only the
diagonals of V and F. The filter starts from ``N(θ₀, V₀)`` with θ₀ the parameters given
to ``init`` and ``V₀ = 1 / (c · prior_precision)`` (or ``init_variance``): the prior,
centred at the starting point, which is exact when θ₀ is the prior's mean (0) and keeps
a network's initialisation otherwise (its all-zero mean would have no useful gradient).

For a model linear in θ with a Gaussian likelihood, the expected Fisher is the exact
Hessian and the update is exactly the Kalman filter: one pass over the data from θ₀ = 0
with ``decay = 1`` and ``q = 0`` gives the exact posterior (with a dense covariance; the
diagonal one drops the correlations of each step). The update is also one step of online
natural-gradient ascent with step size V (Ollivier, 2018). With ``decay < 1`` or ``q > 0``
the filter forgets old batches, so several passes do not over-count the data.

Temperature: with the prior weight c of the convention, the filter's V is the covariance
of the target at T = 1 rescaled, so the reported posterior is ``N(μ, T · V)``; the mean
path does not depend on T (except through c), and T = 0 gives a point mass.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, Engine, Posterior, Problem
from bayesflow.engines.curvature import diagonal_ggn, example_gradients, log_likelihood_gradient
from bayesflow.errors import StageError
from bayesflow.methods.ekf import EKFBase, EKFDiagSpec
from bayesflow.temperature import Tempering

__all__ = ["EKFDiagState", "build", "initial_variance", "step_loss"]


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


def initial_variance(
    name: str, problem: Problem, tempering: Tempering, config: EKFBase, like: Tensor
) -> Tensor:
    """``V₀`` (d,): ``init_variance``, or ``1 / (c · prior_precision)``.

    Raises:
        StageError: when some parameter has no prior precision and no ``init_variance``.
    """
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
    with torch.no_grad():
        return -problem.log_posterior(mean, batch, prior_weight=tempering.prior_weight)


def build(problem: Problem, tempering: Tempering, config: EKFDiagSpec) -> Engine:
    """Diagonal EKF over minibatches; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T scales the reported covariance; the convention sets the prior weight.
        config: the method's spec (passes, batch size, Fisher, decay, transition variance).
    """
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
