"""Gaussian variational inference: mean-field (``vi_diag``) or full covariance (``vi_dense``).

The approximation is ``q(θ) = N(μ, L Lᵀ)`` with a lower-triangular scale L whose diagonal
is positive, parameterised without constraints by its **scale** S:

- ``vi_diag`` (Blundell et al., 2015, https://arxiv.org/abs/1505.05424): S = ρ (d,), the
  log standard deviations, and ``L = diag(exp ρ)``;
- ``vi_dense`` (Titsias & Lázaro-Gredilla, 2014,
  https://proceedings.mlr.press/v32/titsias14.html): S = A (d, d), and the Cholesky
  factor ``L = tril(A, −1) + diag(exp(diag A))``.

The two differ only in that covariance family; the objective, the gradient estimator,
the optimiser and the aux are one code path. Minimising ``KL(q ‖ p_T)`` to the tempered
target ``p_T ∝ exp(f / 𝒯)`` of :mod:`bayesflow.temperature` is maximising
``E_q[f]/𝒯 + H[q]``; multiplied by 𝒯 = T / N this is the per-datum objective, finite at
every T ≥ 0::

    L(μ, S) = E_q[f(θ; batch)] + 𝒯 · H[q],   H[q] = Σ log diag L + d/2 · log(2πe)

At T = 1 it is the textbook ELBO divided by N; at T = 0 the entropy weight is 0 and q
collapses onto a mode. The expectation is estimated with ``n_samples`` reparameterised
draws ``θ = μ + L ε`` (Kingma & Welling, 2014). With ``stick_the_landing`` the entropy is
estimated as ``−mean log q(θ)`` at those draws with **both** μ and S detached inside
``log q`` (Roeder et al., 2017, https://arxiv.org/abs/1703.09194): the gradient then
flows only through the draws, and its variance vanishes when q equals the target (the
posteriors library's dense VI detaches only the factor, which keeps part of the score
term). Otherwise the closed form above is used. ``(μ, S)`` are optimised with torchopt's
arithmetic, in place (:mod:`bayesflow.engines.optimize`), as the spec's ``optimizer`` says (its weight decay, if any, applies to both; Adam at a
constant rate with none runs as :mod:`bayesflow.engines.adam`'s same step on one tensor;
``vi_diag`` takes the chain rule from the draws to (μ, ρ) in closed form,
:func:`diagonal_gradient`); S starts at
``init_log_sd`` on the diagonal (and 0 below it). The dense covariance is d × d: models
above :data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, PositiveInt

from bayesflow.methods.base import (
    PREDICTION_DESCRIPTION,
    Method,
    MethodBase,
    OptimizerSpec,
    Prediction,
    Traits,
)

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import Tempering

__all__ = [
    "DENSE",
    "DIAGONAL",
    "METHODS",
    "Family",
    "VIBase",
    "VIDenseSpec",
    "VISpec",
    "VIState",
    "build",
    "build_dense",
    "cholesky_factor",
    "entropy",
]


class VIBase(MethodBase):
    """Fields shared by the variational methods."""

    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    n_samples: PositiveInt = Field(
        1, description="Monte Carlo samples of the ELBO's expectation per step."
    )
    init_log_sd: float = Field(
        -3.0, description="Initial log standard deviation of every parameter."
    )
    stick_the_landing: bool = Field(
        True, description="Drop the score term of the entropy gradient (Roeder et al., 2017)."
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class VISpec(VIBase):
    """Variational inference with a diagonal Gaussian (``vi_diag``)."""

    engine: Literal["vi_diag"] = Field(description="Registry name of the engine.")


class VIDenseSpec(VIBase):
    """Variational inference with a full-covariance Gaussian (``vi_dense``, small models)."""

    engine: Literal["vi_dense"] = Field(description="Registry name of the engine.")


def build(problem: Problem, tempering: Tempering, config: VISpec) -> Engine:
    """Mean-field VI: maximise ``E_q[f] + 𝒯·H[q]`` over ``q = N(μ, diag(exp 2ρ))``."""
    return build_variational(problem, tempering, config, DIAGONAL)


def build_dense(problem: Problem, tempering: Tempering, config: VIDenseSpec) -> Engine:
    """Full-covariance VI: maximise ``E_q[f] + 𝒯·H[q]`` over ``q = N(μ, L Lᵀ)``.

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    from bayesflow.engines.base import check_dense_dimension

    check_dense_dimension("vi_dense", problem, "vi_diag")
    return build_variational(problem, tempering, config, DENSE)


def build_variational(
    problem: Problem, tempering: Tempering, config: VIBase, family: Family
) -> Engine:
    """Maximise ``E_q[f] + 𝒯·H[q]`` over the Gaussians of ``family`` with torchopt.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N weighs the entropy; the convention sets the prior weight.
        config: the method's spec (optimiser, epochs, batch size, samples, initial sd).
        family: the covariance family (:data:`DIAGONAL` or :data:`DENSE`).
    """
    import torch

    from bayesflow.engines.adam import constant_adam
    from bayesflow.engines.base import Engine
    from bayesflow.engines.gradient import chain_gradient, chain_values, value_and_grad
    from bayesflow.engines.optimize import build_step, steps_per_epoch

    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_step(config.optimizer, total_steps)
    adam = constant_adam(config.optimizer)  # the same Adam in a third of the kernels
    per_datum, prior_weight = tempering.per_datum, tempering.prior_weight
    diagonal = family is DIAGONAL

    # The draws' log posteriors as K chains': the forward on flat views, one reverse pass.
    log_posteriors = chain_values(problem, prior_weight)
    # Mean-field: the draws' gradients as K chains' and the rest in closed form.
    draw_gradient = chain_gradient(problem, prior_weight) if diagonal else None

    def loss_fn(packed: Tensor, batch: Batch, noise: Tensor) -> Tensor:
        mean, scale = unpack(packed)
        draws = mean + family.times_factor(scale, noise)
        expected = log_posteriors(draws, batch[0], batch[1], True).mean()
        if per_datum == 0:
            return -expected
        estimate = entropy(family, mean, scale, draws, config.stick_the_landing)
        return -(expected + per_datum * estimate)

    def unpack(packed: Tensor) -> tuple[Tensor, Tensor]:
        """μ and S as views of the one tensor the optimiser updates: rows 0 and 1 (diag)
        or 0 and 1…d (dense)."""
        return packed[0], (packed[1] if diagonal else packed[1:])

    def init(params: Tensor, generator: torch.Generator) -> VIState:
        mean = params.detach()
        scale = family.initial_scale(mean, config.init_log_sd)
        packed = torch.cat([mean.unsqueeze(0), scale.reshape(-1, mean.shape[0])])
        moments = adam.init(packed) if adam is not None else optimizer.init(packed)
        return VIState(*unpack(packed), moments, generator, 0, packed)

    def update(state: VIState, batch: Batch) -> tuple[VIState, dict[str, Tensor]]:
        noise = torch.randn(
            (config.n_samples, state.mean.shape[0]),
            generator=state.generator,
            dtype=state.mean.dtype,
            device=state.generator.device,
        ).to(state.mean.device)
        if draw_gradient is not None:
            grads, loss = diagonal_gradient(
                draw_gradient, state.packed, batch, noise, per_datum, config.stick_the_landing
            )
        else:
            (grads,), loss = value_and_grad(loss_fn, (state.packed,), batch, noise)
        # One tensor: the optimiser's elementwise update runs once, not once per part, in
        # place (``packed`` is the state's own, made in ``init``; μ and S are its views).
        optimizer_state: Any
        if adam is not None:
            packed, optimizer_state = adam.step_(state.packed, grads, state.optimizer)
        else:
            packed, optimizer_state = optimizer.step(state.packed, grads, state.optimizer)
        new_state = VIState(
            *unpack(packed), optimizer_state, state.generator, state.step + 1, packed
        )
        return new_state, {"loss": loss}

    def posterior(state: VIState) -> Posterior:
        return family.posterior(state.mean, state.scale)

    return Engine(init, update, posterior, config.epochs, config.batch_size)


def diagonal_gradient(
    gradient: Any,
    packed: Tensor,
    batch: Batch,
    noise: Tensor,
    per_datum: float,
    stick_the_landing: bool,
) -> tuple[Tensor, Tensor]:
    """The mean-field loss ``−(mean_s f(θ_s) + 𝒯·H)`` and its gradient in ``packed`` =
    (μ, ρ) (2, d), with θ_s = μ + σ ε_s, σ = exp ρ, from the draws' gradients ∇f(θ_s)
    (one reverse pass over the likelihood, :func:`~bayesflow.engines.gradient.chain_gradient`)
    and the chain rule in closed form: with a_s = ∇f(θ_s) + 𝒯 ε_s/σ under
    ``stick_the_landing`` (the gradient of ``−log q`` at a draw, μ and σ held) or
    a_s = ∇f(θ_s) otherwise, ``∂/∂μ = −mean_s a_s`` and ``∂/∂ρ = −mean_s a_s σ ε_s``
    (minus 𝒯 more for the closed-form entropy Σρ). The same numbers as autograd through
    :func:`entropy`, in about a third of the kernels."""
    import torch

    mean, scale = packed[0], packed[1]
    sigma = scale.exp()
    spread = sigma * noise
    grads, values = gradient(spread + mean, batch)
    count, dimension = noise.shape
    expected = values.mean()
    if per_datum == 0:
        ascent, loss = grads, -expected
    elif stick_the_landing:
        ascent = torch.addcdiv(grads, noise, sigma, value=per_datum)
        estimate = 0.5 * noise.square().sum() / count + scale.sum()
        loss = -(expected + per_datum * (estimate + 0.5 * dimension * math.log(2 * math.pi)))
    else:
        ascent = grads
        estimate = scale.sum() + 0.5 * dimension * math.log(2 * math.pi * math.e)
        loss = -(expected + per_datum * estimate)
    weighted = ascent * spread
    if count == 1:
        result = torch.cat([ascent, weighted]).mul_(-1.0)
    else:
        result = torch.stack([ascent.sum(0), weighted.sum(0)]).mul_(-1.0 / count)
    if per_datum != 0 and not stick_the_landing:
        result[1].sub_(per_datum)
    return result, loss


class VIState(NamedTuple):
    """The state of a variational fit.

    Attributes:
        mean: μ (d,).
        scale: the unconstrained scale S: ρ = log σ (d,) for ``vi_diag``, the matrix A
            (d, d) of the Cholesky factor for ``vi_dense`` (see the module docstring).
        optimizer: the optimiser's state over ``packed``:
            :class:`~bayesflow.engines.optimize.OptimizerState`, or
            :class:`~bayesflow.engines.adam.AdamState` for Adam at a constant rate.
        generator: the source of the reparameterisation noise.
        step: update steps taken.
        packed: μ and S in one tensor (2, d) for ``vi_diag``, (d + 1, d) for ``vi_dense``,
            of which ``mean`` and ``scale`` are views (the optimiser updates it whole).
    """

    mean: Tensor
    scale: Tensor
    optimizer: Any
    generator: torch.Generator
    step: int
    packed: Tensor

    @property
    def log_sd(self) -> Tensor:
        """ρ = log σ of a mean-field fit (its scale); for a dense fit, log diag L, the log
        conditional standard deviations."""
        return self.scale if self.scale.dim() == 1 else self.scale.diagonal()


class Family(NamedTuple):
    """A covariance family of q, as functions of the unconstrained scale S.

    Attributes:
        initial_scale: ``(mean (d,), log_sd) -> S``, log sd ``log_sd`` everywhere.
        times_factor: ``(S, noise (n, d)) -> (L ε)ᵀ (n, d)`` for each row ε of noise.
        standardise: ``(S, deviations (n, d)) -> (L⁻¹ δ)ᵀ (n, d)``.
        log_determinant: ``S -> log det L = Σ log diag L``.
        posterior: ``(mean, S) -> Posterior`` with ``var`` or ``cov``.
    """

    initial_scale: Callable[[Tensor, float], Tensor]
    times_factor: Callable[[Tensor, Tensor], Tensor]
    standardise: Callable[[Tensor, Tensor], Tensor]
    log_determinant: Callable[[Tensor], Tensor]
    posterior: Callable[[Tensor, Tensor], Posterior]


def entropy(
    family: Family, mean: Tensor, scale: Tensor, draws: Tensor, stick_the_landing: bool
) -> Tensor:
    """``H[q]``: closed form, or ``−mean log q(draws)`` with μ and S detached in ``log q``.

    Args:
        family: the covariance family of q.
        mean, scale: the variational parameters μ (d,) and S.
        draws: reparameterised samples (n, d) that depend on (μ, S).
        stick_the_landing: whether to use the Roeder et al. (2017) estimator.
    """
    dimension = mean.shape[-1]
    if not stick_the_landing:
        return family.log_determinant(scale) + 0.5 * dimension * math.log(2 * math.pi * math.e)
    mean, scale = mean.detach(), scale.detach()
    standardised = family.standardise(scale, draws - mean)
    log_q = (
        -0.5 * (standardised**2).sum(-1)
        - family.log_determinant(scale)
        - 0.5 * dimension * math.log(2 * math.pi)
    )
    return -log_q.mean()


def cholesky_factor(factor: Tensor) -> Tensor:
    """``L = tril(A, −1) + diag(exp(diag A))``, lower-triangular with a positive diagonal."""
    import torch

    return torch.tril(factor, -1) + torch.diag_embed(factor.diagonal().exp())


def _diagonal_initial_scale(mean: Tensor, log_sd: float) -> Tensor:
    import torch

    return torch.full_like(mean, log_sd)


def _dense_initial_scale(mean: Tensor, log_sd: float) -> Tensor:
    import torch

    return torch.diag(torch.full_like(mean, log_sd))


def _dense_standardise(scale: Tensor, deviations: Tensor) -> Tensor:
    import torch

    lower = cholesky_factor(scale)
    return torch.linalg.solve_triangular(lower, deviations.T, upper=False).T


def _diagonal_posterior(mean: Tensor, scale: Tensor) -> Posterior:
    from bayesflow.engines.base import Posterior

    return Posterior(mean=mean, var=(2 * scale).exp())


def _dense_posterior(mean: Tensor, scale: Tensor) -> Posterior:
    from bayesflow.engines.base import Posterior

    lower = cholesky_factor(scale)
    return Posterior(mean=mean, cov=lower @ lower.T)


# q = N(μ, diag(exp 2ρ)): S = ρ (d,).
DIAGONAL = Family(
    initial_scale=_diagonal_initial_scale,
    times_factor=lambda scale, noise: scale.exp() * noise,
    standardise=lambda scale, deviations: deviations / scale.exp(),
    log_determinant=lambda scale: scale.sum(),
    posterior=_diagonal_posterior,
)
# q = N(μ, L Lᵀ) with L = tril(A, −1) + diag(exp(diag A)): S = A (d, d).
DENSE = Family(
    initial_scale=_dense_initial_scale,
    times_factor=lambda scale, noise: noise @ cholesky_factor(scale).T,
    standardise=_dense_standardise,
    log_determinant=lambda scale: scale.diagonal().sum(),
    posterior=_dense_posterior,
)

# Its loss, minus the tempered ELBO per datum, is checked for convergence (evaluate/flags.py).
_TRAITS = Traits(posterior="gaussian", diagnostics=frozenset({"loss_convergence"}))
METHODS = (
    Method("vi_diag", VISpec, _TRAITS, build),
    Method("vi_dense", VIDenseSpec, _TRAITS, build_dense),
)
