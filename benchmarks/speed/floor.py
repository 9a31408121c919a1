"""The hand-written floor: K SGHMC chains in plain torch, for Pima and for the digits MLP.

What a performance-minded user would write for the Pima problem with no library at all,
and so the floor bayesflow is measured against (issue 16: within 1.3× of it):

- one (K, d) parameter tensor and one (K, d) momentum tensor, updated in place;
- the model's forward on flat views of it: ``w = θ[:, :f]``, ``b = θ[:, f]`` (the
  layout of ``nn.Linear(f, 1)``'s weight then bias, as bayesflow flattens it), one
  ``addmm`` for a batch every chain shares or one ``baddbmm`` for K batches of their own;
- the per-datum log posterior of every chain, ``mean_i log p(yᵢ|xᵢ,θ_k) + log p(θ_k)/N``,
  summed over chains, and ONE ``torch.autograd.grad`` for all K gradients (the chains do
  not interact, so the gradient of the sum in θ_k is chain k's gradient);
- the SGHMC update of Chen et al. (2014) with σ = 1 and β = 0, as bayesflow and
  posteriors take it: ``θ ← θ + ε m``, ``m ← (1 − εα) m + ε ∇f(θ_old) + N(0, 2εα𝒯)``,
  with 𝒯 = T / N, the noise drawn into one preallocated buffer.

:func:`check_gradient` compares its gradients with bayesflow's before anything is timed,
so the floor computes the same thing. :class:`FloorMLP` is the same floor for the digits
MLP (one hidden ReLU layer, a categorical likelihood), written with ``baddbmm`` on views
of the (K, d) tensor: the reference for what ten chains can cost against one on that
model (the vectorised grid's target).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional

from bayesflow.engines.base import Batch, ChainBatch
from benchmarks.common.problems import Setup

__all__ = ["FloorMLP", "FloorSGHMC", "check_gradient"]


class FloorSGHMC:
    """One SGHMC step of K logistic-regression chains per call, on batches taken in turn.

    Args:
        setup: the Pima problem (a linear model: d = features + 1).
        params, momenta: the K chains' starting points and momenta (K, d); copied.
        batches: plain batches that every chain shares, or ``ChainBatch`` es (K, B, ...).
        lr, alpha: the step size ε and the friction α.
        temperature: the user's T (the noise is drawn at 𝒯 = T / N).
        seed: the noise generator's seed.
    """

    def __init__(
        self,
        setup: Setup,
        params: Tensor,
        momenta: Tensor,
        batches: list[Batch],
        *,
        lr: float,
        alpha: float,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        self._check(setup, params)
        self.params, self.momenta = params.detach().clone(), momenta.detach().clone()
        self.batches = [self.prepare(batch) for batch in batches]
        self.position = 0
        self.lr, self.alpha = lr, alpha
        self.prior_scale = 0.5 / (setup.prior_variance * setup.num_data)
        self.noise_scale = math.sqrt(2 * lr * alpha * temperature / setup.num_data)
        self.noise = torch.empty_like(self.params)
        self.generator = torch.Generator(device=self.params.device).manual_seed(seed)

    def prepare(self, batch: Batch) -> Any:
        """The batch with float targets, made once (the bernoulli log likelihood's form)."""
        return _float_targets(batch)

    def _check(self, setup: Setup, params: Tensor) -> None:
        self.features = int(setup.inputs.shape[1])
        if params.shape[1] != self.features + 1:
            raise ValueError(
                f"the floor is logistic regression (d = {self.features + 1}), got d = "
                f"{params.shape[1]}"
            )

    def log_posterior(self, params: Tensor, batch: Batch) -> Tensor:
        """Σ_k f_k(θ_k): every chain's per-datum log posterior, summed (prior constant left out)."""
        inputs, targets = batch
        weight, bias = params[:, : self.features], params[:, self.features]
        if isinstance(batch, ChainBatch):
            logits = torch.baddbmm(bias[:, None, None], inputs, weight.unsqueeze(-1)).squeeze(-1)
        else:
            logits = torch.addmm(bias.unsqueeze(1), weight, inputs.T)
        log_likelihood = -functional.binary_cross_entropy_with_logits(
            logits, targets.expand_as(logits), reduction="none"
        ).mean(-1)
        return log_likelihood.sum() - self.prior_scale * params.square().sum()

    def gradient(self, params: Tensor, batch: Batch) -> Tensor:
        """∇f_k(θ_k) of every chain (K, d), by one reverse pass over the sum."""
        with torch.enable_grad():
            leaf = params.detach().requires_grad_(True)
            (grads,) = torch.autograd.grad(self.log_posterior(leaf, batch), (leaf,))
        return grads

    def __call__(self) -> None:
        batch = self.batches[self.position]
        self.position = (self.position + 1) % len(self.batches)
        grads = self.gradient(self.params, batch)
        with torch.no_grad():
            self.params.add_(self.momenta, alpha=self.lr)
            self.momenta.mul_(1 - self.lr * self.alpha).add_(grads, alpha=self.lr)
            if self.noise_scale > 0:
                self.noise.normal_(generator=self.generator)
                self.momenta.add_(self.noise, alpha=self.noise_scale)


class FloorMLP(FloorSGHMC):
    """:class:`FloorSGHMC` for a one-hidden-layer ReLU MLP with a categorical likelihood
    (the layout of ``Sequential(Linear, ReLU, Linear)``: weights then biases, per layer).
    A plain batch is every chain's; a ``ChainBatch`` gives each chain its own."""

    def __init__(
        self, setup: Setup, params: Tensor, momenta: Tensor, batches: list[Batch], **hyper: Any
    ) -> None:
        shapes = setup.problem.param_shapes
        if len(shapes) != 4 or setup.likelihood.name != "categorical":
            raise ValueError(f"the MLP floor needs Linear, ReLU, Linear; got shapes {shapes}")
        (self.hidden, self.features), (self.classes, _) = shapes[0], shapes[2]
        self.sizes = [math.prod(shape) for shape in shapes]
        super().__init__(setup, params, momenta, batches, **hyper)

    def _check(self, setup: Setup, params: Tensor) -> None:
        """No check of d against the features (the MLP has its own layout)."""

    def prepare(self, batch: Batch) -> Any:
        """Batches as they are (the categorical likelihood takes integer targets)."""
        return batch

    def log_posterior(self, params: Tensor, batch: Batch) -> Tensor:
        """Σ_k f_k(θ_k) of the MLP (prior constant left out)."""
        inputs, targets = batch
        count = params.shape[0]
        if not isinstance(batch, ChainBatch):
            inputs, targets = inputs.expand(count, *inputs.shape), targets.expand(count, -1)
        first, first_bias, second, second_bias = params.split(self.sizes, dim=1)
        hidden = torch.baddbmm(
            first_bias.unsqueeze(1),
            inputs,
            first.view(count, self.hidden, self.features).transpose(1, 2),
        ).relu()
        outputs = torch.baddbmm(
            second_bias.unsqueeze(1),
            hidden,
            second.view(count, self.classes, self.hidden).transpose(1, 2),
        )
        batch_size = outputs.shape[1]
        log_likelihood = (
            -functional.cross_entropy(
                outputs.reshape(-1, self.classes), targets.reshape(-1), reduction="sum"
            )
            / batch_size
        )
        return log_likelihood - self.prior_scale * params.square().sum()


def _float_targets(batch: Batch) -> Any:
    """The batch with float targets, made once (the bernoulli log likelihood's form)."""
    inputs, targets = batch
    if isinstance(batch, ChainBatch):
        return ChainBatch(inputs, targets.to(inputs.dtype))
    return inputs, targets.to(inputs.dtype)


def check_gradient(floor: FloorSGHMC, setup: Setup, params: Tensor, batch: Batch) -> float:
    """The largest difference between the floor's gradients and bayesflow's at ``params``.

    Raises:
        AssertionError: when they differ (the comparison would not be of the same work).
    """
    from bayesflow.engines.gradient import chain_gradient

    ours, _ = chain_gradient(setup.problem, 1.0)(params, batch)
    theirs = floor.gradient(params, floor.prepare(batch))
    difference = float((ours - theirs).abs().max())
    if not torch.allclose(ours, theirs, rtol=1e-4, atol=1e-6):
        raise AssertionError(
            f"the hand-written floor's gradients differ from bayesflow's by {difference:.3g} "
            "at the same θ and batch; the comparison would be unfair"
        )
    return difference
