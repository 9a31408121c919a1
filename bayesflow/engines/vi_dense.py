"""Full-covariance Gaussian variational inference (``vi_dense``), small models.

The approximation is ``q(θ) = N(μ, L Lᵀ)`` with a lower-triangular Cholesky factor L
whose diagonal is positive: ``L = tril(A, −1) + diag(exp(diag A))`` for an unconstrained
(d, d) matrix A (the diagonal holds log scales, initialised at ``init_log_sd``; the
strictly lower part starts at 0). As for ``vi_diag`` (:mod:`bayesflow.engines.vi`), the
per-datum objective against the tempered target ``exp(f/𝒯)`` is::

    L(μ, A) = E_q[f(θ; batch)] + 𝒯 · H[q],   𝒯 = T / N

(Titsias & Lázaro-Gredilla, 2014, https://proceedings.mlr.press/v32/titsias14.html, for
the full-rank reparameterised ELBO), estimated with ``n_samples`` draws
``θ = μ + L ε``. With ``stick_the_landing`` the entropy is ``−mean log q(θ)`` at those
draws with **both** μ and L detached inside ``log q`` (Roeder et al., 2017,
https://arxiv.org/abs/1703.09194): the gradient then flows only through the draws, and
its variance vanishes when q equals the target (the posteriors library detaches only the
factor, which keeps part of the score term). Otherwise the closed form
``H[q] = Σ log diag L + d/2 · log(2πe)`` is used.

Temperature: 𝒯 weighs the entropy, so at T = 1 this is the textbook ELBO divided by N,
and at T = 0 the entropy vanishes and q collapses onto a mode. The parameters (μ, A) are
optimised by torchopt as the spec's ``optimizer`` says. The covariance is d × d: models
above :data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torchopt
from torch import Tensor
from torch.func import grad_and_value, vmap

from bayesflow.engines.base import Batch, Engine, Posterior, Problem, check_dense_dimension
from bayesflow.engines.optimize import build_optimizer, steps_per_epoch
from bayesflow.methods.vi import VIDenseSpec
from bayesflow.temperature import Tempering

__all__ = ["VIDenseState", "build", "cholesky_factor", "dense_entropy"]


class VIDenseState(NamedTuple):
    """The state of a full-covariance variational fit.

    Attributes:
        mean: μ (d,).
        factor: the unconstrained A (d, d) of the Cholesky factor (see the module doc).
        optimizer: torchopt's optimiser state over ``(mean, factor)``.
        generator: the source of the reparameterisation noise.
        step: update steps taken.
    """

    mean: Tensor
    factor: Tensor
    optimizer: Any
    generator: torch.Generator
    step: int


def cholesky_factor(factor: Tensor) -> Tensor:
    """``L = tril(A, −1) + diag(exp(diag A))``, lower-triangular with a positive diagonal."""
    return torch.tril(factor, -1) + torch.diag_embed(factor.diagonal().exp())


def dense_entropy(mean: Tensor, factor: Tensor, draws: Tensor, stick_the_landing: bool) -> Tensor:
    """``H[q]``: closed form, or ``−mean log q(draws)`` with μ and L detached in ``log q``.

    Args:
        mean: μ (d,).
        factor: the unconstrained A (d, d).
        draws: reparameterised samples (S, d) that depend on (μ, A).
        stick_the_landing: whether to use the Roeder et al. (2017) estimator.
    """
    dimension = mean.shape[-1]
    if not stick_the_landing:
        return factor.diagonal().sum() + 0.5 * dimension * math.log(2 * math.pi * math.e)
    mean, factor = mean.detach(), factor.detach()
    lower = cholesky_factor(factor)
    standardised = torch.linalg.solve_triangular(lower, (draws - mean).T, upper=False)
    log_q = (
        -0.5 * (standardised**2).sum(0)
        - factor.diagonal().sum()
        - 0.5 * dimension * math.log(2 * math.pi)
    )
    return -log_q.mean()


def build(problem: Problem, tempering: Tempering, config: VIDenseSpec) -> Engine:
    """Maximise ``E_q[f] + 𝒯·H[q]`` over a full-covariance Gaussian q with torchopt.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N weighs the entropy; the convention sets the prior weight.
        config: the method's spec (optimiser, epochs, batch size, samples, initial sd).

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    check_dense_dimension("vi_dense", problem, "vi_diag")
    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_optimizer(config.optimizer, total_steps)
    per_datum, prior_weight = tempering.per_datum, tempering.prior_weight

    def log_posterior(params: Tensor, batch: Batch) -> Tensor:
        return problem.log_posterior(params, batch, prior_weight=prior_weight)

    def loss_fn(variational: tuple[Tensor, Tensor], batch: Batch, noise: Tensor) -> Tensor:
        mean, factor = variational
        draws = mean + noise @ cholesky_factor(factor).T
        expected = vmap(log_posterior, in_dims=(0, None))(draws, batch).mean()
        if per_datum == 0:
            return -expected
        entropy = dense_entropy(mean, factor, draws, config.stick_the_landing)
        return -(expected + per_datum * entropy)

    def init(params: Tensor, generator: torch.Generator) -> VIDenseState:
        mean = params.detach().clone()
        factor = torch.diag(torch.full_like(mean, config.init_log_sd))
        return VIDenseState(mean, factor, optimizer.init((mean, factor)), generator, 0)

    def update(state: VIDenseState, batch: Batch) -> tuple[VIDenseState, dict[str, Tensor]]:
        noise = torch.randn(
            (config.n_samples, state.mean.shape[0]),
            generator=state.generator,
            dtype=state.mean.dtype,
            device=state.generator.device,
        ).to(state.mean.device)
        variational = (state.mean, state.factor)
        grads, loss = grad_and_value(loss_fn)(variational, batch, noise)
        updates, optimizer_state = optimizer.update(
            grads, state.optimizer, params=variational, inplace=False
        )
        mean, factor = torchopt.apply_updates(variational, updates, inplace=False)
        new_state = VIDenseState(mean, factor, optimizer_state, state.generator, state.step + 1)
        return new_state, {"loss": loss.detach()}

    def posterior(state: VIDenseState) -> Posterior:
        lower = cholesky_factor(state.factor)
        return Posterior(mean=state.mean, cov=lower @ lower.T)

    return Engine(init, update, posterior, config.epochs, config.batch_size)
