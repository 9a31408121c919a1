"""torchopt optimisers, learning-rate schedules and step counts, shared by every method
that optimises (``map``, ``mle``, ``deep_ensemble``, ``vi_*``) and by the SG-MCMC step
sizes (:func:`steps_per_epoch`).

The optimisers are those of torchopt (Ren et al., 2023, https://arxiv.org/abs/2211.06934)
with a learning-rate schedule over the update steps. The methods themselves live in
:mod:`bayesflow.methods`.
"""

from __future__ import annotations

import math

import torch
import torchopt
from torchopt.typing import Numeric, ScalarOrSchedule

from bayesflow.methods.base import OptimizerSpec, ScheduleSpec

__all__ = ["build_optimizer", "build_schedule", "steps_per_epoch"]


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
