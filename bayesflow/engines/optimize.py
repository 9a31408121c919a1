"""Point estimates by optimisation: maximum a posteriori (``map``) and likelihood (``mle``).

Both engines run a torchopt functional optimiser on the flat parameter vector θ and
minimise the negative per-datum log posterior of :mod:`bayesflow.temperature`::

    loss(θ; batch) = −f(θ; batch) = −mean log p(yᵢ|xᵢ,θ) − c · log p(θ) / N

with ``c = tempering.prior_weight`` for ``map`` (1 when the whole posterior is tempered,
``T`` when only the likelihood is) and ``c = 0`` for ``mle``. The mode of the tempered
target ``exp(f / 𝒯)`` does not depend on 𝒯, so the temperature enters only through
``c``. The posterior is a point mass: ``Posterior(mean=θ, var=0)``.

The optimisers are those of torchopt (Ren et al., 2023, https://arxiv.org/abs/2211.06934)
with a learning-rate schedule over the update steps; :func:`build_optimizer` is shared
with the variational engine.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torchopt
from torch import Tensor
from torch.func import grad_and_value
from torchopt.typing import Numeric, ScalarOrSchedule

from bayesflow.engines.base import Batch, Engine, Posterior, Problem
from bayesflow.methods.base import OptimizerSpec, ScheduleSpec
from bayesflow.methods.optimize import OptimizeSpec
from bayesflow.temperature import Tempering

__all__ = [
    "OptimizeState",
    "build_map",
    "build_mle",
    "build_optimizer",
    "build_schedule",
    "steps_per_epoch",
]


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


class OptimizeState(NamedTuple):
    """The state of a point-estimate fit.

    Attributes:
        params: the current estimate θ (d,).
        optimizer: torchopt's optimiser state.
        step: update steps taken.
    """

    params: Tensor
    optimizer: Any
    step: int


def build(problem: Problem, prior_weight: float, config: OptimizeSpec) -> Engine:
    """Gradient descent on ``−f(θ) = −mean log p(y|x,θ) − prior_weight · log p(θ) / N``.

    Args:
        problem: the model, likelihood, prior and data size.
        prior_weight: ``c``, the weight of the prior term (0 for maximum likelihood).
        config: the method's spec (optimiser, epochs, batch size).
    """
    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_optimizer(config.optimizer, total_steps)

    def loss_fn(params: Tensor, batch: Batch) -> Tensor:
        return -problem.log_posterior(params, batch, prior_weight=prior_weight)

    def init(params: Tensor, generator: torch.Generator) -> OptimizeState:
        # The optimisation is deterministic given the batches; the generator is unused.
        params = params.detach().clone()
        return OptimizeState(params, optimizer.init(params), 0)

    def update(state: OptimizeState, batch: Batch) -> tuple[OptimizeState, dict[str, Tensor]]:
        grads, loss = grad_and_value(loss_fn)(state.params, batch)
        updates, optimizer_state = optimizer.update(
            grads, state.optimizer, params=state.params, inplace=False
        )
        params = torchopt.apply_updates(state.params, updates, inplace=False)
        return OptimizeState(params, optimizer_state, state.step + 1), {"loss": loss.detach()}

    def posterior(state: OptimizeState) -> Posterior:
        return Posterior(mean=state.params, var=torch.zeros_like(state.params))

    return Engine(init, update, posterior, config.epochs, config.batch_size)


def build_map(problem: Problem, tempering: Tempering, config: OptimizeSpec) -> Engine:
    """Maximum a posteriori estimate by optimisation (a point mass at the mode)."""
    return build(problem, tempering.prior_weight, config)


def build_mle(problem: Problem, tempering: Tempering, config: OptimizeSpec) -> Engine:
    """Maximum likelihood estimate by optimisation (the prior is ignored)."""
    return build(problem, 0.0, config)
