"""K chains' log likelihood gradient in closed form for a one-output linear model (a GLM).

For a model that is one ``nn.Linear`` with one output (bayesflow's ``logistic`` and
``linear``: ``z = x·w + b``) under a bernoulli or gaussian likelihood, the gradient of
every chain's mean log likelihood over its batch needs no reverse pass::

    ∂/∂[w_k, b_k] mean_j log p(y_kj | z_kj) = Σ_j g_kj [x_kj, 1],
    g = (y − σ(z)) / B (bernoulli),   g = (y − z) / (s² B) (gaussian of noise sd s).

The values are the likelihood's own, and ``g`` is computed by the kernels the reverse
pass runs (``(σ(z) − y)·(−1/B)``; ``((y − z)/s · 1/B)/s``), so values and gradients equal
the reverse pass's to float rounding (on a shared batch, to the bit where measured).
:func:`bayesflow.engines.gradient.chain_gradient` uses it under a normal prior, whose
gradient it adds in closed form.

- One batch per chain (a :class:`~bayesflow.engines.base.ChainBatch`, inputs (K, B, I)):
  the forward is ``w_kᵀ (1, I) @ x_kᵀ (I, B)`` plus the bias, and the reduction ``g_kᵀ x_k``
  reads ``g`` from row 0 of a (K, 2, B) buffer whose row 1 stays zero, so that torch's CPU
  runs it as a batched GEMM rather than its loop over tiny products: of the forms timed,
  the fastest.
- A batch every chain shares (inputs (n, I)): the reverse pass's ``[w, b] @ [x, 1]ᵀ`` on
  the cached ``[x, 1]ᵀ`` (``w @ xᵀ`` without a bias) and ``g @ [x, 1]``, with no autograd
  graph.

Measured (each form against the others, the gradient and the SGHMC step with and without
this module): docs/benchmarks.md#the-closed-form-glm-gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional

from bayesflow.engines.base import Problem

__all__ = ["GLMGradient", "glm_gradient"]

# (params (K, d), inputs, targets, shared) -> (∇ mean log lik (K, d), mean log lik (K,)),
# or None for a batch of another form (the caller's reverse pass takes it).
GLMGradient = Callable[[Tensor, Tensor, Tensor, bool], tuple[Tensor, Tensor] | None]

# Devices whose reduction reads the residuals from the (K, 2, B) buffer (module docstring):
# torch's CPU bmm; elsewhere the plain (K, 1, B) product.
PADDED_DEVICES = ("cpu",)


def glm_gradient(problem: Problem) -> GLMGradient | None:
    """The closed-form likelihood gradient of ``problem`` (module docstring), or None when
    the model is not one linear layer of one output or the likelihood is not a bound
    bernoulli or gaussian one."""
    from bayesflow.engines.flat import layers_of
    from bayesflow.likelihoods import Likelihood

    likelihood: Any = getattr(problem.log_likelihood, "__self__", None)
    if not isinstance(likelihood, Likelihood) or likelihood.name not in ("bernoulli", "gaussian"):
        return None
    layers = layers_of(problem)
    if layers is None or len(layers) != 1 or not isinstance(layers[0], tuple):
        return None
    start, width_out, width, bias_start = layers[0]
    if start != 0 or width_out != 1 or bias_start not in (None, width):
        return None
    bias = bias_start is not None
    bernoulli = likelihood.name == "bernoulli"
    buffers: dict[tuple[int, int, torch.dtype, torch.device], Tensor] = {}
    means: dict[tuple[int, torch.dtype, torch.device], tuple[Tensor, Tensor]] = {}
    # The last shared batch: (inputs, targets, their versions, dtype) -> ([x, 1]ᵀ, y).
    shared_cache: list[Any] = []

    def residual_rows(count: int, size: int, like: Tensor) -> Tensor:
        """A (K, 2, B) buffer whose row 1 is zero (the reduction's batched GEMM)."""
        key = (count, size, like.dtype, like.device)
        if key not in buffers:
            buffers.clear()  # one shape at a time: the last batch's
            buffers[key] = like.new_zeros(count, 2, size)
        return buffers[key]

    def mean_backward(size: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """The mean's backward, 1/B divided in the outputs' float type, and its negative."""
        key = (size, like.dtype, like.device)
        if key not in means:
            inverse = like.new_ones(()).div_(size)
            means.clear()
            means[key] = (inverse, -inverse)
        return means[key]

    def likelihood_terms(
        outputs: Tensor, observed: Tensor, out: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Every chain's mean log likelihood (K,) and its derivative in the outputs (K, B)
        (written into ``out`` when given), computed as the reverse pass computes them
        (the same kernels on the same numbers: a shared batch's gradient matched the
        reverse pass's to the bit where measured; see the module docstring)."""
        mean = mean_backward(outputs.shape[-1], outputs)
        if bernoulli:
            value = functional.binary_cross_entropy_with_logits(
                outputs, observed.expand_as(outputs), reduction="none"
            ).mean(1).neg_()
            return value, torch.sub(outputs.sigmoid(), observed, out=out).mul_(mean[1])
        value = likelihood.log_prob(outputs.unsqueeze(-1), observed.expand_as(outputs)).mean(1)
        residual = (observed - outputs) / likelihood.noise_sd
        return value, torch.mul(residual, mean[0], out=out).div_(likelihood.noise_sd)

    def own_batches(
        params: Tensor, inputs: Tensor, targets: Tensor
    ) -> tuple[Tensor, Tensor] | None:
        """Inputs (K, B, I) and targets (K, B), one batch per chain."""
        count = params.shape[0]
        if inputs.dim() != 3 or inputs.shape[0] != count or targets.shape != inputs.shape[:2]:
            return None
        weights = params[:, :width].unsqueeze(1)  # (K, 1, I)
        outputs = torch.bmm(weights, inputs.transpose(1, 2))  # (K, 1, B)
        if bias:
            outputs = outputs.add_(params[:, width:].unsqueeze(1))
        rows = None
        if inputs.device.type in PADDED_DEVICES:
            rows = residual_rows(count, inputs.shape[1], params)
        value, slope = likelihood_terms(
            outputs.squeeze(1), targets.to(params.dtype), None if rows is None else rows[:, 0]
        )
        if rows is not None:
            weight_grad = torch.bmm(rows, inputs)[:, 0]
        else:
            weight_grad = torch.bmm(slope.unsqueeze(1), inputs).squeeze(1)
        if not bias:
            return weight_grad.contiguous(), value
        return torch.cat([weight_grad, slope.sum(1, keepdim=True)], 1), value

    def shared_batch(
        params: Tensor, inputs: Tensor, targets: Tensor
    ) -> tuple[Tensor, Tensor] | None:
        """Inputs (n, I) and targets (n,) that every chain shares: the reverse pass's
        products (``[w, b] @ [x, 1]ᵀ`` on the cached ``[x, 1]ᵀ`` with a bias, ``w @ xᵀ``
        without) and their backward."""
        if inputs.dim() != 2 or targets.shape != inputs.shape[:1]:
            return None
        key = (inputs, targets, inputs._version, targets._version, params.dtype)
        if not shared_cache or any(
            old is not new if isinstance(new, Tensor) else old != new
            for old, new in zip(shared_cache[0], key, strict=True)
        ):
            columns = inputs.T
            if bias:
                columns = torch.cat([columns, inputs.new_ones(1, inputs.shape[0])])
            shared_cache[:] = [key, columns, targets.to(params.dtype)]
        columns, observed = shared_cache[1], shared_cache[2]
        value, slope = likelihood_terms(torch.mm(params, columns), observed, None)
        return torch.mm(slope, columns.T), value

    def gradient(
        params: Tensor, inputs: Tensor, targets: Tensor, shared: bool
    ) -> tuple[Tensor, Tensor] | None:
        if inputs.dtype != params.dtype or inputs.shape[-1] != width:
            return None
        if shared:
            return shared_batch(params, inputs, targets)
        return own_batches(params, inputs, targets)

    return gradient
