"""Online extended Kalman filter with a dense covariance (``ekf_dense_fisher``), small models.

The filter of Ollivier (2018, https://arxiv.org/abs/1703.00209) with a full d × d
covariance: the same belief, predict and update steps as :mod:`ekf_diag_fisher` (where
the start from the prior, the choice of Fisher and the temperature are described), with
the matrices kept whole::

    predict:  V ← V / decay + q I
    update:   V ← (V⁻¹ + F_B)⁻¹,   μ ← μ + V g_B
              F_B = Σ_{i∈B} Jᵢᵀ Hᵢ Jᵢ (``fisher: expected``) or Σ_{i∈B} gᵢ gᵢᵀ (``empirical``)

The Fisher is **added** to the precision, so the covariance shrinks as data arrive (the
posteriors library's ``ekf.dense_fisher`` 0.1.3 subtracts it, and its covariance grows).
For a model linear in θ with a Gaussian likelihood and ``fisher: expected`` this is
exactly the Kalman filter: one pass from θ₀ = 0 (the prior mean) with ``decay = 1`` and
``q = 0`` gives the exact posterior, whatever the minibatches.

Temperature: the reported posterior is ``N(μ, T · V)`` (see :mod:`ekf_diag_fisher`).
Each step inverts two d × d matrices, so models above
:data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, Engine, Posterior, Problem, check_dense_dimension
from bayesflow.engines.curvature import dense_ggn, example_gradients, log_likelihood_gradient
from bayesflow.engines.ekf_diag_fisher import initial_variance, step_loss
from bayesflow.engines.laplace import dense_inverse
from bayesflow.methods.ekf import EKFDenseSpec
from bayesflow.temperature import Tempering

__all__ = ["EKFDenseState", "build"]


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


def build(problem: Problem, tempering: Tempering, config: EKFDenseSpec) -> Engine:
    """Dense EKF over minibatches; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T scales the reported covariance; the convention sets the prior weight.
        config: the method's spec (passes, batch size, Fisher, decay, transition variance).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
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
