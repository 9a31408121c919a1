"""Optimisers, learning-rate schedules and step counts, shared by every method that
optimises (``map``, ``mle``, ``deep_ensemble``, ``vi_*``) and by the SG-MCMC step sizes
(:func:`steps_per_epoch`).

The optimisers are torchopt's ``sgd``, ``adam`` and ``adamw`` (Ren et al., 2023,
https://arxiv.org/abs/2211.06934) with a learning-rate schedule over the update steps.
The engines run them as :class:`InPlaceOptimizer` (:func:`build_step`): the same update,
operation for operation, written on the one tensor an engine optimises and done in
place, as ``torch.optim`` does. torchopt's functional form (:func:`build_optimizer`, kept
as the reference the tests compare against) makes new moments, new parameters and about
a dozen temporaries over d every step; at a language model's last decoder layer
(d = 9.4M) that put the peak memory of a MAP fit 1.29x above a plain ``torch.optim.AdamW``
loop's (docs/llm.md, "Measured"). The in-place step holds the parameters, the moments,
the gradient (reused as scratch) and one temporary: what ``torch.optim.AdamW`` holds.
The methods themselves live in :mod:`bayesflow.methods`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torchopt
from torch import Tensor
from torchopt.typing import Numeric, ScalarOrSchedule

from bayesflow.methods.base import OptimizerSpec, ScheduleSpec

__all__ = [
    "InPlaceOptimizer",
    "OptimizerState",
    "build_optimizer",
    "build_schedule",
    "build_step",
    "steps_per_epoch",
]

BETAS = (0.9, 0.999)  # torchopt's defaults for adam and adamw
EPSILON = 1e-8


def steps_per_epoch(num_data: int, batch_size: int | None) -> int:
    """Update steps in one pass over ``num_data`` points (the last batch may be short)."""
    if batch_size is None:
        return 1
    return max(1, math.ceil(num_data / batch_size))


def build_schedule(lr: float, schedule: ScheduleSpec, total_steps: int) -> ScalarOrSchedule:
    """The learning rate as a constant or a function of torchopt's step count.

    ``cosine``, ``linear`` and ``exponential`` go from ``lr`` at step 0 to
    ``lr · final_fraction`` at ``total_steps`` and stay there. The exponential decay
    cannot reach 0, so a ``final_fraction`` of 0 is floored at 1e-8 for it.
    """
    final = lr * schedule.final_fraction
    total = max(1, total_steps)
    if schedule.kind == "constant":
        return lr
    if schedule.kind == "linear":
        return torchopt.schedule.linear_schedule(lr, final, total)
    if schedule.kind == "exponential":
        rate = max(schedule.final_fraction, 1e-8)
        return lambda count: lr * rate ** (torch.clamp(torch.as_tensor(count) / total, max=1.0))

    def cosine(count: Numeric) -> Numeric:
        progress = torch.clamp(torch.as_tensor(count) / total, max=1.0)
        return final + (lr - final) * 0.5 * (1.0 + torch.cos(math.pi * progress))

    return cosine


def build_optimizer(spec: OptimizerSpec, total_steps: int) -> torchopt.base.GradientTransformation:
    """The torchopt optimiser a spec names, with its schedule over ``total_steps``."""
    lr = build_schedule(spec.lr, spec.schedule, total_steps)
    if spec.name == "sgd":
        return torchopt.sgd(lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    if spec.name == "adam":
        return torchopt.adam(lr, weight_decay=spec.weight_decay)
    return torchopt.adamw(lr, weight_decay=spec.weight_decay)


class OptimizerState(NamedTuple):
    """An :class:`InPlaceOptimizer`'s moments, like the parameters, and its step count.

    Attributes:
        first: Adam's first moment, or SGD's momentum buffer (None without momentum).
        second: Adam's second moment (None for SGD).
        steps: steps taken.
    """

    first: Tensor | None
    second: Tensor | None
    steps: int


@dataclass(frozen=True)
class InPlaceOptimizer:
    """torchopt's ``sgd`` / ``adam`` / ``adamw`` on one tensor, updated in place.

    :meth:`step` changes the parameters and the state's moments in place and returns
    them, and overwrites the gradient it is given (its scratch space): an engine hands
    it the state's own tensors (copied once, in ``init``) and a gradient it keeps no
    other use for. The arithmetic is torchopt's, operation for operation: weight decay
    added to the gradient (``sgd``, ``adam``: L2) or to the update (``adamw``:
    decoupled), the momentum buffer starting at the first gradient, Adam's bias
    corrections ``1 − β^t`` in float32 as torchopt takes them, ε = 1e-8 outside the
    square root, and the learning rate read from the schedule at the step count before
    the step (tests/engines/test_inplace_optimizer.py checks the trajectories against
    torchopt's functional steps and ``torch.optim``'s).

    Attributes:
        name: ``sgd``, ``adam`` or ``adamw``.
        lr: the learning rate, a constant or a schedule of the step count
            (:func:`build_schedule`).
        momentum: SGD's momentum (0: none).
        weight_decay: L2 (``sgd``, ``adam``) or decoupled (``adamw``) weight decay.
    """

    name: str
    lr: ScalarOrSchedule
    momentum: float = 0.0
    weight_decay: float = 0.0

    def init(self, params: Tensor) -> OptimizerState:
        """Zero moments like ``params`` (none for SGD without momentum)."""
        if self.name == "sgd":
            buffer = torch.zeros_like(params) if self.momentum > 0 else None
            return OptimizerState(buffer, None, 0)
        return OptimizerState(torch.zeros_like(params), torch.zeros_like(params), 0)

    def rate(self, steps: int) -> float:
        """The learning rate of the step after ``steps`` steps (torchopt reads its
        schedule at the count before the step)."""
        if callable(self.lr):
            return float(self.lr(torch.tensor(steps)))
        return float(self.lr)

    def step(self, params: Tensor, grads: Tensor, state: OptimizerState) -> tuple[Tensor, OptimizerState]:
        """One descent step down ``grads``: ``params`` and the moments change in place
        (and are returned), ``grads`` is overwritten."""
        if not grads.is_contiguous():  # an expanded gradient cannot be written to
            grads = grads.contiguous()
        descent = -self.rate(state.steps)
        if self.weight_decay and self.name != "adamw":
            grads.add_(params, alpha=self.weight_decay)
        if self.name == "sgd":
            if state.first is None:
                update = grads.mul_(descent)
            else:
                # torchopt's first step sets the buffer to the gradient: 0·μ + g is g.
                state.first.mul_(self.momentum).add_(grads)
                update = torch.mul(state.first, descent, out=grads)
            params.add_(update)
            return params, state._replace(steps=state.steps + 1)
        first, second = state.first, state.second
        assert first is not None and second is not None  # init made them
        (beta1, beta2), count = BETAS, state.steps + 1
        first.mul_(beta1).add_(grads, alpha=1 - beta1)
        second.mul_(beta2).addcmul_(grads, grads, value=1 - beta2)
        # The gradient's storage, no longer needed, holds the denominator √v̂ + ε.
        denominator = torch.div(second, _correction(beta2, count), out=grads).sqrt_().add_(EPSILON)
        update = torch.div(first, _correction(beta1, count)).div_(denominator)
        if self.weight_decay and self.name == "adamw":
            update.add_(params, alpha=self.weight_decay)
        params.add_(update.mul_(descent))
        return params, OptimizerState(first, second, count)


def _correction(beta: float, count: int) -> float:
    """``1 − β^count`` as torchopt computes it (a float32 tensor from its integer count)."""
    return float(1 - pow(beta, torch.tensor(count)))


def build_step(spec: OptimizerSpec, total_steps: int) -> InPlaceOptimizer:
    """The in-place optimiser a spec names, with its schedule over ``total_steps``: the
    steps of :func:`build_optimizer`'s torchopt optimiser."""
    lr = build_schedule(spec.lr, spec.schedule, total_steps)
    momentum = spec.momentum if spec.name == "sgd" else 0.0
    return InPlaceOptimizer(spec.name, lr, momentum, spec.weight_decay)
