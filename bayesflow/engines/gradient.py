"""Gradients by plain reverse-mode autograd, for one parameter vector or K chains at once.

Every method that follows the gradient of a log posterior takes it from here: the SG-MCMC
samplers (:mod:`bayesflow.engines.sgmcmc`), deep ensembles, MAP and MLE, and VI.

- :func:`value_and_grad`: ``torch.autograd.grad`` on detached leaves. It gives the same
  numbers as ``torch.func.grad_and_value`` without the transform's bookkeeping, which
  dominated a Pima step (measured: docs/benchmarks.md#chain-gradients).
- :func:`chain_gradient`: ``(params (K, d), batch) -> (∇f (K, d), f (K,))`` for K chains
  stacked in one tensor, each with its own per-datum log posterior
  ``f_k(θ) = mean log p(y|x,θ) + c_k log p(θ)/N`` (c_k its prior weight), for a batch
  every chain shares, a :class:`~bayesflow.engines.base.ChainBatch` of one per chain, and
  one chain alike: the K values come from :func:`chain_values` (the forward on flat
  views of the (K, d) tensor, one matrix product per layer for all chains, and the
  likelihood and prior applied once to the stacked outputs and parameters, outside
  ``vmap``: :mod:`bayesflow.engines.flat`), and ONE reverse pass over ``Σ_k f_k`` gives
  every chain's gradient: no f_j depends on θ_k for j ≠ k, so
  ``∂(Σ_j f_j)/∂θ_k = ∇f_k(θ_k)``. It is faster than ``vmap(grad_and_value(f))`` and
  near the hand-written floor (measured: docs/benchmarks.md#chain-gradients).

Under a bound normal prior (:func:`normal_prior_chain_gradient`) the reverse pass covers
the log likelihood alone and the prior's gradient ``−c·precision·θ/N`` is added in closed
form, and a first layer of one output reads ``[w, b]`` against cached ``[x, 1]``
(:mod:`bayesflow.engines.flat`). For a one-output linear model (logistic and linear
regression) under a bernoulli or gaussian likelihood there is no reverse pass at all:
:mod:`bayesflow.engines.glm` gives the likelihood's gradient in closed form, on the
reverse pass's numbers. Measured: docs/benchmarks.md#chain-gradients and
#the-closed-form-glm-gradient.

``compile=True`` (the samplers' and ensembles' ``compile: true``) runs every path as
``torch.compile(vmap(grad_and_value(f)))`` instead, which fuses the elementwise work of
the likelihood and the prior: several times faster per gradient, at the price of a
compilation of seconds to tens of seconds per fit and a C++ compiler on a CPU, so it pays
for long runs with many chains (Table 3's 10,000 chains × 2,000 steps), not for a short
fit (measured: docs/benchmarks.md#compiled-gradients).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.func import grad_and_value, vmap

from bayesflow.engines.base import Batch, ChainBatch, Problem

if TYPE_CHECKING:
    from bayesflow.priors import BoundPrior

__all__ = ["Gradient", "chain_gradient", "chain_values", "value_and_grad"]

# (params (K, d), batch) -> (∇f (K, d), f (K,)).
Gradient = Callable[[Tensor, Batch], tuple[Tensor, Tensor]]


def value_and_grad(
    function: Callable[..., Tensor], leaves: tuple[Tensor, ...], *args: Any
) -> tuple[tuple[Tensor, ...], Tensor]:
    """``function(*leaves, *args)`` detached and its gradients in ``leaves``, by one
    ``torch.autograd.grad`` on detached copies of the leaves.

    Args:
        function: returns a scalar; its gradient is taken in its first ``len(leaves)``
            arguments.
        leaves: the tensors to differentiate in (their own graphs are cut).
        args: further arguments, passed through.
    """
    with torch.enable_grad():
        inputs = tuple(leaf.detach().requires_grad_(True) for leaf in leaves)
        value = function(*inputs, *args)
        grads = differentiate(value, inputs)
    return grads, value.detach()


def chain_gradient(
    problem: Problem, prior_weight: float | Tensor, compile: bool = False
) -> Gradient:
    """The gradients of K independent chains' log posteriors (see the module docstring).

    Args:
        problem: the model, likelihood, prior and data size.
        prior_weight: c, one float for every chain, or a (K,) tensor of one c_k per
            chain (the likelihood convention at several temperatures).
        compile: run the gradient through ``torch.compile`` (see the module docstring).

    Returns:
        ``gradient(params (K, d), batch) -> (∇f (K, d), f (K,))``, ``batch`` one
        ``(inputs, targets)`` that every chain shares or a ``ChainBatch`` of K.
    """
    if compile:
        return compiled_chain_gradient(problem, prior_weight)
    from bayesflow.engines.flat import normal_prior

    prior = normal_prior(problem)
    if prior is not None:
        return normal_prior_chain_gradient(problem, prior_weight, prior)
    values = chain_values(problem, prior_weight)

    def gradient(params: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        inputs, targets = batch
        shared = not isinstance(batch, ChainBatch)
        return summed_values_and_grad(values, params, inputs, targets, shared)

    return gradient


def normal_prior_chain_gradient(
    problem: Problem, prior_weight: float | Tensor, prior: BoundPrior
) -> Gradient:
    """:func:`chain_gradient` under a normal prior of diagonal precision (d,): the
    reverse pass covers the log likelihood only, and the prior's gradient
    ``−c·precision·θ / N`` is added in closed form (one ``addcmul_``); its value takes no
    part in the graph. Saves the prior's six kernels forward and backward (about 8% of a
    one-chain Pima gradient). A GLM's likelihood gradient comes in closed form instead
    (:mod:`bayesflow.engines.glm`), for any batch it accepts."""
    from bayesflow.engines.flat import chain_forward, chain_log_likelihood
    from bayesflow.engines.glm import glm_gradient
    from bayesflow.priors import scaled

    forward = chain_forward(problem)
    log_likelihood = chain_log_likelihood(problem)
    closed_form = glm_gradient(problem)
    half = scaled(prior.precision, -0.5)  # a compact prior's stays a view of one number
    constant = prior.constant
    # c/N: one float, or one per chain (K,); ∂(c log p(θ)/N)/∂θ = −c·precision·θ/N.
    chain_scale: Tensor | None = None
    scale = 0.0
    if isinstance(prior_weight, Tensor):
        chain_scale = prior_weight / problem.num_data
        slope = (2 * half) * chain_scale.unsqueeze(-1)
    else:
        scale = prior_weight / problem.num_data
        slope = scaled(scaled(half, 2), scale)
    ones: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}

    def reverse_pass(
        params: Tensor, inputs: Tensor, targets: Tensor, shared: bool
    ) -> tuple[Tensor, Tensor]:
        """The log likelihood's gradient (K, d) and value (K,) by one reverse pass."""
        count = params.shape[0]
        key = (count, params.dtype, params.device)
        if key not in ones:  # the reverse pass's seed: d(Σ_k f_k)/d f_k = 1
            ones[key] = params.new_ones(count)
        with torch.enable_grad():
            leaf = params.detach().requires_grad_(True)
            log_lik = log_likelihood(forward(leaf, inputs, shared), targets, shared)
            if log_lik.requires_grad:
                (grads,) = torch.autograd.grad(log_lik, (leaf,), ones[key])
            else:
                grads = torch.zeros_like(params)
        return grads, log_lik.detach()

    def gradient(params: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        inputs, targets = batch
        shared = not isinstance(batch, ChainBatch)
        found = None
        if closed_form is not None:
            found = closed_form(params.detach(), inputs, targets, shared)
        if found is not None:
            grads, log_lik = found
        else:
            grads, log_lik = reverse_pass(params, inputs, targets, shared)
        log_prior = quadratic(params, half.to(params))
        if chain_scale is not None:
            value = torch.addcmul(log_lik, chain_scale, log_prior + constant)
        else:
            value = torch.add(log_lik, log_prior + constant, alpha=scale)
        return grads.addcmul_(params, slope.to(params)), value

    return gradient


def quadratic(params: Tensor, weights: Tensor) -> Tensor:
    """``Σ_i weights_i θ_ki²`` of every row (K,): for a compact prior's weights (a
    stride-0 view of one number) by one batched dot product, with no (K, d) square."""
    if weights.dim() == 1 and weights.numel() > 1 and weights.stride(0) == 0:
        rows = params.unsqueeze(1)
        return torch.bmm(rows, rows.transpose(1, 2)).view(-1) * weights[0]
    return torch.mv(params.square(), weights)


def chain_values(problem: Problem, prior_weight: float | Tensor) -> Callable[..., Tensor]:
    """``values(params (K, d), inputs, targets, shared) -> f (K,)``, every chain's per-datum
    log posterior, with the forward on flat views where the model allows
    (:mod:`bayesflow.engines.flat`) and the likelihood and prior outside ``vmap``."""
    from bayesflow.engines.flat import chain_forward, chain_log_likelihood, chain_log_prior

    forward = chain_forward(problem)
    log_likelihood = chain_log_likelihood(problem)
    log_prior = chain_log_prior(problem)
    scale = prior_weight / problem.num_data

    def values(params: Tensor, inputs: Tensor, targets: Tensor, shared: bool) -> Tensor:
        outputs = forward(params, inputs, shared)
        log_lik = log_likelihood(outputs, targets, shared)
        if isinstance(scale, Tensor):
            return log_lik + scale * log_prior(params)
        return torch.add(log_lik, log_prior(params), alpha=scale)

    return values


# torch.compile keeps at most 8 compiled versions of one function by default and then
# falls back to eager silently; every compiled gradient is the same vmap wrapper to it,
# one version per model, chain count, batch shape and batch kind, which a sweep in one
# process exceeds. 64 covers the grids measured here.
RECOMPILE_LIMIT = 64


def compiled_chain_gradient(problem: Problem, prior_weight: float | Tensor) -> Gradient:
    """``torch.compile(vmap(grad_and_value(f)))`` for a batch per chain and a shared one."""
    import torch._dynamo

    def log_posterior(params: Tensor, inputs: Tensor, targets: Tensor, weight: Any) -> Tensor:
        return problem.log_posterior(params, (inputs, targets), prior_weight=weight)

    torch._dynamo.config.recompile_limit = max(
        torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
    )
    # c as a tensor: a Python float would be compiled in as a constant, one version each.
    per_chain = isinstance(prior_weight, Tensor)
    weight = prior_weight if per_chain else problem.prior_precision.new_tensor(prior_weight)
    weight_axis = 0 if per_chain else None
    transform = grad_and_value(log_posterior)
    own_batches = torch.compile(vmap(transform, in_dims=(0, 0, 0, weight_axis)), dynamic=False)
    shared_batch = torch.compile(
        vmap(transform, in_dims=(0, None, None, weight_axis)), dynamic=False
    )

    def gradient(params: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        inputs, targets = batch
        compiled = own_batches if isinstance(batch, ChainBatch) else shared_batch
        return compiled(params, inputs, targets, weight)  # type: ignore[no-any-return]

    return gradient


def summed_values_and_grad(
    values: Callable[..., Tensor], params: Tensor, *args: Any
) -> tuple[Tensor, Tensor]:
    """Every chain's ``f_k`` (K,) and, by one reverse pass over their sum, ``∇f_k`` (K, d)."""
    with torch.enable_grad():
        leaf = params.detach().requires_grad_(True)
        value = values(leaf, *args)
        (grads,) = differentiate(value.sum(), (leaf,))
    return grads, value.detach()


def differentiate(value: Tensor, leaves: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """``∂value/∂leaves``, zeros for leaves that ``value`` does not depend on (as
    ``torch.func.grad`` gives; ``torch.autograd.grad`` would refuse)."""
    if not value.requires_grad:
        return tuple(torch.zeros_like(leaf) for leaf in leaves)
    return torch.autograd.grad(value, leaves, allow_unused=True, materialize_grads=True)
