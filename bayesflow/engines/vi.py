"""Mean-field Gaussian variational inference (``vi_diag``).

The approximation is ``q(θ) = N(μ, diag(σ²))`` with ``σ = exp(ρ)`` (Blundell et al., 2015,
https://arxiv.org/abs/1505.05424). Minimising ``KL(q ‖ p_T)`` to the tempered target
``p_T ∝ exp(f / 𝒯)`` of :mod:`bayesflow.temperature` is maximising ``E_q[f]/𝒯 + H[q]``;
multiplied by 𝒯 = T / N this is the per-datum objective, finite at every T ≥ 0::

    L(μ, ρ) = E_q[f(θ; batch)] + 𝒯 · H[q]

At T = 1 it is the textbook ELBO divided by N; at T = 0 the entropy weight is 0 and the
fit collapses onto a mode. The expectation is estimated with ``n_samples``
reparameterised draws ``θ = μ + σ ⊙ ε`` (Kingma & Welling, 2014). With
``stick_the_landing`` the entropy is estimated as ``−log q(θ)`` at those draws with
(μ, ρ) detached inside ``log q``, which drops the zero-mean score term of its gradient
(Roeder et al., 2017, https://arxiv.org/abs/1703.09194); otherwise the closed form
``H[q] = Σ ρ + d/2 · log(2πe)`` is used. The parameters (μ, ρ) are optimised by torchopt
as the spec's ``optimizer`` says (its weight decay, if any, applies to both).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torchopt
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Batch, Engine, Posterior, Problem
from bayesflow.engines.optimize import build_optimizer, steps_per_epoch
from bayesflow.methods.vi import VISpec
from bayesflow.temperature import Tempering

__all__ = ["VIState", "build", "entropy"]


class VIState(NamedTuple):
    """The state of a mean-field variational fit.

    Attributes:
        mean: μ (d,).
        log_sd: ρ = log σ (d,).
        optimizer: torchopt's optimiser state over ``(mean, log_sd)``.
        generator: the source of the reparameterisation noise.
        step: update steps taken.
    """

    mean: Tensor
    log_sd: Tensor
    optimizer: Any
    generator: torch.Generator
    step: int


def entropy(mean: Tensor, log_sd: Tensor, draws: Tensor, stick_the_landing: bool) -> Tensor:
    """``H[q]``: closed form, or ``−mean log q(draws)`` with (μ, ρ) detached inside ``log q``.

    Args:
        mean, log_sd: the variational parameters (d,).
        draws: reparameterised samples (S, d) that depend on (μ, ρ).
        stick_the_landing: whether to use the Roeder et al. (2017) estimator.
    """
    dimension = mean.shape[-1]
    if not stick_the_landing:
        return log_sd.sum() + 0.5 * dimension * math.log(2 * math.pi * math.e)
    mean, log_sd = mean.detach(), log_sd.detach()
    standardised = (draws - mean) / log_sd.exp()
    log_q = (
        -0.5 * (standardised**2).sum(-1) - log_sd.sum() - 0.5 * dimension * math.log(2 * math.pi)
    )
    return -log_q.mean()


def build(problem: Problem, tempering: Tempering, config: VISpec) -> Engine:
    """Maximise ``E_q[f] + 𝒯·H[q]`` over a diagonal Gaussian q with torchopt.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N weighs the entropy; the convention sets the prior weight.
        config: the method's spec (optimiser, epochs, batch size, samples, initial sd).
    """
    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_optimizer(config.optimizer, total_steps)
    per_datum = tempering.per_datum
    prior_weight = tempering.prior_weight

    def log_posterior(params: Tensor, batch: Batch) -> Tensor:
        return problem.log_posterior(params, batch, prior_weight=prior_weight)

    def loss_fn(variational: tuple[Tensor, Tensor], batch: Batch, noise: Tensor) -> Tensor:
        mean, log_sd = variational
        draws = mean + log_sd.exp() * noise
        if draws.shape[0] == 1:  # one draw: skip vmap's overhead (benchmarks/profile.py)
            expected = log_posterior(draws[0], batch)
        else:
            expected = vmap(log_posterior, in_dims=(0, None))(draws, batch).mean()
        if per_datum == 0:
            return -expected
        return -(expected + per_datum * entropy(mean, log_sd, draws, config.stick_the_landing))

    def init(params: Tensor, generator: torch.Generator) -> VIState:
        mean = params.detach().clone()
        log_sd = torch.full_like(mean, config.init_log_sd)
        return VIState(mean, log_sd, optimizer.init((mean, log_sd)), generator, 0)

    def update(state: VIState, batch: Batch) -> tuple[VIState, dict[str, Tensor]]:
        noise = torch.randn(
            (config.n_samples, state.mean.shape[0]),
            generator=state.generator,
            dtype=state.mean.dtype,
            device=state.generator.device,
        ).to(state.mean.device)
        variational = (state.mean, state.log_sd)
        grads, loss = _value_and_grad(loss_fn, variational, batch, noise)
        updates, optimizer_state = optimizer.update(
            grads, state.optimizer, params=variational, inplace=False
        )
        mean, log_sd = torchopt.apply_updates(variational, updates, inplace=False)
        new_state = VIState(mean, log_sd, optimizer_state, state.generator, state.step + 1)
        return new_state, {"loss": loss.detach()}

    def posterior(state: VIState) -> Posterior:
        return Posterior(mean=state.mean, var=(2 * state.log_sd).exp())

    return Engine(init, update, posterior, config.epochs, config.batch_size)


def _value_and_grad(
    loss_fn: Any, variational: tuple[Tensor, Tensor], batch: Batch, noise: Tensor
) -> tuple[tuple[Tensor, ...], Tensor]:
    """Gradients of the loss by plain reverse-mode autograd.

    Measured on Pima (benchmarks/profile.py): a step through torch.func's
    ``grad_and_value`` spends most of its time in the transform's bookkeeping; plain
    ``torch.autograd.grad`` on detached leaves gives the same numbers faster.
    """
    with torch.enable_grad():
        leaves = tuple(tensor.detach().requires_grad_(True) for tensor in variational)
        loss = loss_fn(leaves, batch, noise)
        grads = torch.autograd.grad(loss, leaves)
    return grads, loss.detach()
