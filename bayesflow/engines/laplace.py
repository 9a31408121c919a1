"""Diagonal generalised Gauss-Newton Laplace approximation (``laplace_diag_ggn``), and the
machinery every Laplace engine shares.

Around a mode θ* (the posterior mean of the MAP or MLE method named by ``from:``) the
log target is approximated to second order, with the Hessian of the negative log
likelihood replaced by the generalised Gauss-Newton matrix (Martens, 2020,
https://arxiv.org/abs/1412.1193; Daxberger et al., 2021,
https://arxiv.org/abs/2106.14806) and only its diagonal kept::

    G = Σᵢ diag(Jᵢᵀ Hᵢ Jᵢ),   Jᵢ = ∂ forward(θ*, xᵢ) / ∂θ,   Hᵢ = −∂² log p(yᵢ|oᵢ) / ∂oᵢ²
    Λ = G + c · prior_precision                          (full-data precision)
    q(θ) = N(θ*, diag(T / Λ))

Temperature: the tempered target ``exp(−U(θ)/T)`` has Hessian ``Λ / T`` when
``c = tempering.prior_weight`` (1 when the whole posterior is tempered, ``T`` when only
the likelihood is), so the variance is ``T / Λ``; equivalently ``𝒯 · (Λ / N)⁻¹`` with
the per-datum precision ``Λ / N``. ``T = 0`` gives a point mass at θ*.

One pass over the training data accumulates G; the minibatches only bound memory.
:func:`build_laplace` is this recipe with any curvature, diagonal or dense; the other
Laplace engines (``laplace_diag_fisher``, ``laplace_dense_*``) are one call of it each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, Engine, Posterior, Problem, check_dense_dimension
from bayesflow.engines.curvature import diagonal_ggn
from bayesflow.errors import StageError
from bayesflow.methods.laplace import LaplaceBase, LaplaceSpec
from bayesflow.temperature import Tempering

__all__ = ["Curvature", "LaplaceState", "build", "build_laplace", "diagonal_ggn"]

Curvature = Callable[[Problem, Tensor, Batch], Tensor]


class LaplaceState(NamedTuple):
    """The state of a Laplace fit.

    Attributes:
        params: the mode θ* (d,).
        curvature: the curvature summed over the examples seen so far: (d,) for a
            diagonal approximation, (d, d) for a dense one.
    """

    params: Tensor
    curvature: Tensor


def build_laplace(
    name: str,
    problem: Problem,
    tempering: Tempering,
    config: LaplaceBase,
    curvature: Curvature,
    diagonal: str | None = None,
) -> Engine:
    """A Laplace engine ``N(θ*, T · (C + c·prior_precision)⁻¹)`` for a curvature C.

    Args:
        name: the engine's registry name, for messages.
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (its ``batch_size`` bounds the curvature pass's memory).
        curvature: ``(problem, θ*, batch) -> C`` summed over the batch's examples.
        diagonal: None when C is diagonal (d,) and the posterior has ``var``; for a dense
            C (d, d) and a posterior with ``cov``, the diagonal engine to suggest when the
            model is too large for it.

    Raises:
        StageError: for a dense approximation of a model with too many parameters.
    """
    dense = diagonal is not None
    if diagonal is not None:
        check_dense_dimension(name, problem, diagonal)
    temperature, prior_weight = tempering.temperature, tempering.prior_weight

    def init(params: Tensor, generator: torch.Generator) -> LaplaceState:
        # Deterministic: the generator is unused.
        params = params.detach().clone()
        size = (params.shape[0], params.shape[0]) if dense else (params.shape[0],)
        return LaplaceState(params, params.new_zeros(size))

    def update(state: LaplaceState, batch: Batch) -> tuple[LaplaceState, dict[str, Tensor]]:
        total = state.curvature + curvature(problem, state.params, batch).detach()
        with torch.no_grad():
            loss = -problem.log_posterior(state.params, batch, prior_weight=prior_weight)
        return LaplaceState(state.params, total), {"loss": loss}

    def posterior(state: LaplaceState) -> Posterior:
        prior = prior_weight * problem.prior_precision
        if not dense:
            if temperature == 0:
                return Posterior(mean=state.params, var=torch.zeros_like(state.params))
            precision = state.curvature + prior
            check_precision(name, precision, problem)
            return Posterior(mean=state.params, var=temperature / precision)
        if temperature == 0:
            return Posterior(mean=state.params, cov=torch.zeros_like(state.curvature))
        precision = state.curvature + torch.diag(prior)
        return Posterior(mean=state.params, cov=temperature * dense_inverse(name, precision))

    return Engine(init, update, posterior, 1, config.batch_size)


def build(problem: Problem, tempering: Tempering, config: LaplaceSpec) -> Engine:
    """Diagonal GGN Laplace approximation ``N(θ*, diag(T / (G + c·prior_precision)))``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (the minibatch size of the curvature pass).
    """
    return build_laplace("laplace_diag_ggn", problem, tempering, config, diagonal_ggn)


def dense_inverse(name: str, precision: Tensor) -> Tensor:
    """``precision⁻¹`` by Cholesky, symmetrised; an error that says what to do if not PD."""
    precision = 0.5 * (precision + precision.T)
    factor, info = torch.linalg.cholesky_ex(precision)
    if int(info) != 0:
        raise StageError(
            f"{name}: the posterior precision is not positive definite (its leading minor "
            f"of order {int(info)} is not positive): the starting point is not a mode, or "
            "the data and the prior leave a direction unconstrained. Fit the `from` method "
            "longer, use a proper prior (`prior: {name: diag_normal}`), or use a GGN or "
            "Fisher curvature, which is positive semi-definite everywhere."
        )
    inverse = torch.cholesky_inverse(factor)
    return 0.5 * (inverse + inverse.T)


def check_precision(name: str, precision: Tensor, problem: Problem) -> None:
    """Raise when a parameter has no curvature and no prior, so an infinite variance."""
    flat = precision <= 0
    if bool(flat.any()):
        count = int(flat.sum())
        index = int(flat.nonzero()[0])
        raise StageError(
            f"{name}: {count} of {problem.dimension} parameters have zero "
            f"posterior precision (the first is {locate(problem, index)}): the data do not "
            "constrain them and there is no prior, so their variance would be infinite. "
            "Use a proper prior, for example `prior: {name: diag_normal}`."
        )


def locate(problem: Problem, index: int) -> str:
    """Name a flat index as ``tensor_name[position]``."""
    for name, shape in zip(problem.param_names, problem.param_shapes):
        size = int(torch.Size(shape).numel())
        if index < size:
            return f"{name}[{index}]"
        index -= size
    return f"flat index {index}"
