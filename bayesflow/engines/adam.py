"""Adam at a constant learning rate on one tensor, in eight kernels a step.

torchopt's ``adam`` (what :func:`bayesflow.engines.optimize.build_optimizer` builds) maps
each step over a tree of tensors, with its bias corrections as tensors: about 19
kernels and a pytree walk, 66 µs a step on VI's (2, 9) Pima parameters (one thread,
2-core CPU), a fifth of the whole step. (The engines' general optimiser,
:class:`~bayesflow.engines.optimize.InPlaceOptimizer`, is torchopt's arithmetic exactly,
float32 bias corrections included; this one keeps its own, in Python floats.) :class:`ConstantAdam` is the same update
(Kingma & Ba, 2015, https://arxiv.org/abs/1412.6980, with torchopt's defaults: betas
0.9 and 0.999, ε = 1e-8 added outside the square root) for the one case a method can
hand it a single tensor and nothing else to do: ``name: adam`` with no weight decay and
a constant learning rate (:func:`constant_adam`). Every other optimiser spec stays with
torchopt. tests/engines/test_step_fast_paths.py checks it against torchopt's steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from bayesflow.methods.base import OptimizerSpec

__all__ = ["AdamState", "ConstantAdam", "constant_adam"]

BETAS = (0.9, 0.999)
EPSILON = 1e-8


class AdamState(NamedTuple):
    """Adam's moments and step count.

    Attributes:
        mu: the first moment, like the parameters.
        nu: the second moment, like the parameters.
        steps: steps taken.
    """

    mu: Tensor
    nu: Tensor
    steps: int


@dataclass(frozen=True)
class ConstantAdam:
    """Adam at learning rate ``lr``, descending: ``params ← params − lr·m̂/(√v̂ + ε)``."""

    lr: float

    def init(self, params: Tensor) -> AdamState:
        """Zero moments like ``params``."""
        return AdamState(torch.zeros_like(params), torch.zeros_like(params), 0)

    def step(self, params: Tensor, grads: Tensor, state: AdamState) -> tuple[Tensor, AdamState]:
        """One Adam step from ``params`` down ``grads`` into new tensors (nothing a caller
        holds changes): :meth:`step_` on copies."""
        moments = AdamState(state.mu.clone(), state.nu.clone(), state.steps)
        return self.step_(params.clone(), grads.clone(), moments)

    def step_(self, params: Tensor, grads: Tensor, state: AdamState) -> tuple[Tensor, AdamState]:
        """One Adam step from ``params`` down ``grads`` in place: ``params`` and the
        moments change (and are returned), ``grads`` is overwritten (it holds the
        denominator); the same arithmetic as :meth:`step`."""
        first, second = BETAS
        count = state.steps + 1
        mu = state.mu.mul_(first).add_(grads, alpha=1 - first)
        nu = state.nu.mul_(second).addcmul_(grads, grads, value=1 - second)
        denominator = torch.div(nu, 1 - second**count, out=grads).sqrt_().add_(EPSILON)
        step = -self.lr / (1 - first**count)
        return params.addcdiv_(mu, denominator, value=step), AdamState(mu, nu, count)


def constant_adam(spec: OptimizerSpec) -> ConstantAdam | None:
    """A :class:`ConstantAdam` for ``spec`` when it is Adam with no weight decay and a
    constant learning rate, else None (use torchopt)."""
    if spec.name != "adam" or spec.weight_decay != 0 or spec.schedule.kind != "constant":
        return None
    return ConstantAdam(spec.lr)
