"""K chains' forward pass, log likelihood and log prior, on flat parameter views.

:func:`bayesflow.engines.gradient.chain_values` builds every chain's log posterior from
the three functions here, each of which takes the K chains at once:

- :func:`chain_forward`: ``(params (K, d), inputs, shared) -> outputs (K, n, k)``. For a
  model that is an ``nn.Linear`` or an ``nn.Sequential`` of ``nn.Linear`` layers and
  elementwise activations (bayesflow's ``mlp``, ``linear`` and ``logistic``), each layer
  reads its weight and bias as views of the (K, d) tensor and runs as one matrix product
  for all chains: ``mm`` on the inputs that every chain shares (the first layer of a
  shared batch), ``baddbmm`` on per-chain activations. Any other model is
  ``vmap(problem.forward)`` over the chains.
- :func:`chain_log_likelihood`: the likelihood applied once to the (K, n, k) outputs,
  outside ``vmap``. Under ``vmap`` ``binary_cross_entropy_with_logits`` has no batching
  rule and decomposes into about ten elementwise kernels forward and backward; applied to
  the stacked outputs it is one fused kernel (measured, Pima, K = 100, full batch: the
  gradient 5.8 → 3.8 ms).
- :func:`chain_log_prior`: the bound prior on the (K, d) tensor directly (it sums over
  the last axis), else ``vmap(problem.log_prior)``.

Functions supplied by hand (a test's ``Problem`` of lambdas) fall back to ``vmap`` piece
by piece, so every problem gets the same values as ``vmap(problem.log_posterior)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.func import vmap

from bayesflow.engines.base import Problem

if TYPE_CHECKING:
    from bayesflow.priors import BoundPrior

__all__ = [
    "ELEMENTWISE",
    "chain_forward",
    "chain_log_likelihood",
    "chain_log_prior",
    "layers_of",
    "normal_prior",
]

# Modules applied to activations of any shape as they are: the flat forward calls them on
# (K, n, width) tensors.
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.Tanh, nn.GELU, nn.Sigmoid, nn.SiLU, nn.ELU, nn.LeakyReLU, nn.Softplus,
    nn.Identity,
)

# A linear layer as (weight offset, out features, in features, bias offset or None).
Linear = tuple[int, int, int, int | None]
Layer = Linear | nn.Module


def layers_of(problem: Problem) -> list[Layer] | None:
    """The model of ``problem`` as linear layers (offsets into the flat vector) and
    elementwise modules, or None when it is not such a stack.

    The model is the module that :func:`bayesflow.problem.build_problem` calls (its
    ``module``); the layers are used only when the module's parameters are exactly
    the problem's, in the same order (a subset problem or a hand-written ``forward`` has
    other parameters, or none recorded).
    """
    module = problem.module
    if not isinstance(module, nn.Module):
        return None
    children = list(module) if type(module) is nn.Sequential else [module]
    named = list(module.named_parameters())
    if tuple(name for name, _ in named) != problem.param_names:
        return None
    offsets, position = {}, 0
    for _, value in named:
        offsets[id(value)] = position
        position += value.numel()
    if position != problem.dimension:
        return None
    layers: list[Layer] = []
    for child in children:
        if type(child) is nn.Linear:
            bias = None if child.bias is None else offsets[id(child.bias)]
            layers.append(
                (offsets[id(child.weight)], child.out_features, child.in_features, bias)
            )
        elif type(child) in ELEMENTWISE:
            layers.append(child)
        else:
            return None
    if not any(isinstance(layer, tuple) for layer in layers):
        return None
    return layers


def chain_forward(problem: Problem) -> Callable[[Tensor, Tensor, bool], Tensor]:
    """``forward(params (K, d), inputs, shared) -> outputs (K, n, k)``: inputs (n, ...)
    that every chain shares, or (K, n, ...) one batch per chain (module docstring)."""
    layers = layers_of(problem)
    own = vmap(problem.forward, in_dims=(0, 0))
    common = vmap(problem.forward, in_dims=(0, None))

    def vmapped(params: Tensor, inputs: Tensor, shared: bool) -> Tensor:
        if params.shape[0] == 1:  # one chain: the model as it is, no vmap
            return problem.forward(params[0], inputs if shared else inputs[0]).unsqueeze(0)
        return (common if shared else own)(params, inputs)  # type: ignore[no-any-return]

    if layers is None:
        return vmapped
    stack = layers

    # The last shared inputs, [x, 1]ᵀ (in + 1, n) made contiguous (measured 15% faster
    # than the transposed view at K = 100 and 1,000), and the inputs' version (a full
    # batch hands the same inputs every step).
    augmented: list[Any] = []

    def with_ones(inputs: Tensor) -> Tensor:
        if augmented and augmented[0] is inputs and augmented[2] == inputs._version:
            return augmented[1]  # type: ignore[no-any-return]
        ones = inputs.new_ones(1, inputs.shape[0])
        augmented[:] = [inputs, torch.cat([inputs.T, ones]), inputs._version]
        return augmented[1]  # type: ignore[no-any-return]

    def forward(params: Tensor, inputs: Tensor, shared: bool) -> Tensor:
        if inputs.dim() != (2 if shared else 3):  # rows of more than one axis
            return vmapped(params, inputs, shared)
        count = params.shape[0]
        hidden = inputs
        for layer in stack:
            if not isinstance(layer, tuple):
                hidden = layer(hidden)
                continue
            start, width_out, width_in, bias_start = layer
            if shared and hidden is inputs and width_out == 1 and bias_start == start + width_in:
                # A regression's weight then bias, [w, b] per chain, against [x, 1]: one
                # mm, and a reverse pass with no slices to scatter back (about 5% of a
                # one-chain Pima gradient).
                whole = start == 0 and params.shape[1] == bias_start + 1
                rows = params if whole else params[:, start : bias_start + 1]
                hidden = torch.mm(rows, with_ones(inputs)).unsqueeze(-1)
                shared = False
                continue
            weight = params[:, start : start + width_out * width_in]
            bias = None if bias_start is None else params[:, bias_start : bias_start + width_out]
            if shared:  # (n, in) inputs: one mm for every chain's weights
                hidden = shared_layer(hidden, weight, bias, count, width_out, width_in)
                shared = False
            elif count == 1:  # one chain (MAP, VI's one draw): plain mm, no batch
                hidden = shared_layer(hidden[0], weight, bias, 1, width_out, width_in)
            else:
                transposed = weight.view(count, width_out, width_in).transpose(1, 2)
                if bias is None:
                    hidden = torch.bmm(hidden, transposed)
                else:
                    hidden = torch.baddbmm(bias.unsqueeze(1), hidden, transposed)
        return hidden

    return forward


def shared_layer(
    inputs: Tensor, weight: Tensor, bias: Tensor | None, count: int, width_out: int,
    width_in: int,
) -> Tensor:
    """A linear layer of K chains on inputs (n, in) that every chain shares: (K, n, out),
    by one ``mm``. One output (a logistic or linear regression) is computed as (K, n), the
    layout of the per-chain likelihood that follows; wider layers as (n, K·out), viewed as
    (K, n, out), which the next ``bmm`` reads without a copy (the (K·out, n) product
    measured 40% slower on the digits MLP, whose activations it leaves transposed)."""
    flat_weight = weight.reshape(count * width_out, width_in)
    if width_out == 1:
        if bias is None:
            return (flat_weight @ inputs.T).unsqueeze(-1)
        return torch.addmm(bias, flat_weight, inputs.T).unsqueeze(-1)
    if bias is None:
        product = inputs @ flat_weight.T
    else:
        product = torch.addmm(bias.reshape(-1), inputs, flat_weight.T)
    return product.view(-1, count, width_out).transpose(0, 1)


def chain_log_likelihood(problem: Problem) -> Callable[[Tensor, Tensor, bool], Tensor]:
    """``log_likelihood(outputs (K, n, k), targets, shared) -> (K,)``, every chain's mean
    log p(y|x, θ_k) over its batch: targets (n, ...) shared by every chain, or
    (K, n, ...) one per chain."""
    from bayesflow.likelihoods import Likelihood

    likelihood: Any = getattr(problem.log_likelihood, "__self__", None)
    if not isinstance(likelihood, Likelihood):
        own = vmap(problem.log_likelihood, in_dims=(0, 0))
        common = vmap(problem.log_likelihood, in_dims=(0, None))

        def vmapped(outputs: Tensor, targets: Tensor, shared: bool) -> Tensor:
            if outputs.shape[0] == 1:
                own_targets = targets if shared else targets[0]
                return problem.log_likelihood(outputs[0], own_targets).mean().unsqueeze(0)
            values = (common if shared else own)(outputs, targets)
            return values.flatten(1).mean(1)  # type: ignore[no-any-return]

        return vmapped
    bound = likelihood
    # The last targets converted to the outputs' float type, and their conversion: a full
    # batch hands the same targets every step (measured: the conversion and its expand
    # were about 5% of a one-chain Pima step).
    converted: list[Any] = []

    def as_float(targets: Tensor, dtype: torch.dtype) -> Tensor:
        if targets.dtype == dtype:
            return targets
        if (converted and converted[0] is targets and converted[1].dtype == dtype
                and converted[2] == targets._version):  # not changed in place since
            return converted[1]
        converted[:] = [targets, targets.to(dtype), targets._version]
        return converted[1]

    def log_likelihood(outputs: Tensor, targets: Tensor, shared: bool) -> Tensor:
        count = outputs.shape[0]
        if bound.name in ("bernoulli", "gaussian"):  # converted before it is expanded
            targets = as_float(targets, outputs.dtype)
        if shared:  # a view: no copy
            targets = targets.expand(count, *targets.shape)
        return log_prob(outputs, targets).flatten(1).mean(1)

    def log_prob(outputs: Tensor, targets: Tensor) -> Tensor:
        """log p(y|x) of (K, n, ..., k) outputs and (K, n, ...) targets: (K, n, ...)."""
        if bound.name != "categorical":  # elementwise
            return bound.log_prob(outputs, targets)
        classes = outputs.shape[-1]
        flat = bound.log_prob(outputs.reshape(-1, classes), targets.reshape(-1))
        return flat.view(outputs.shape[:-1])

    return log_likelihood


def normal_prior(problem: Problem) -> BoundPrior | None:
    """``problem``'s prior when it is a bound normal prior (whose gradient has a closed
    form), else None."""
    from bayesflow.priors import BoundPrior

    prior = getattr(problem.log_prior, "__self__", None)
    if isinstance(prior, BoundPrior) and prior.family == "normal":
        return prior
    return None


def chain_log_prior(problem: Problem) -> Callable[[Tensor], Tensor]:
    """``log_prior(params (K, d)) -> (K,)``."""
    from bayesflow.priors import BoundPrior, scaled

    prior = getattr(problem.log_prior, "__self__", None)
    if isinstance(prior, BoundPrior) and prior.family == "normal":
        # −½ Σ θ² / v + c as one matrix-vector product: three kernels instead of four.
        half_precision = scaled(prior.precision, -0.5)
        constant = prior.constant
        return lambda params: torch.mv(params.square(), half_precision.to(params)) + constant
    if isinstance(prior, BoundPrior):
        return problem.log_prior
    batched = vmap(problem.log_prior)

    def vmapped(params: Tensor) -> Tensor:
        if params.shape[0] == 1:
            return problem.log_prior(params[0]).unsqueeze(0)
        return batched(params)  # type: ignore[no-any-return]

    return vmapped
