"""SWA-Gaussian (``swag``): a Gaussian fitted to the iterates of SGD, and MultiSWAG.

SWAG (Maddox et al., 2019, https://arxiv.org/abs/1902.02476) runs SGD with momentum on the
negative per-datum log posterior −f of :mod:`bayesflow.temperature` (as ``map`` does) and,
after ``burn_in`` epochs, collects an iterate θᵢ every ``collect_every`` steps. Over the n
collected iterates it keeps the running moments and the deviations of the last K::

    θ̄ₙ = θ̄ₙ₋₁ + (θₙ − θ̄ₙ₋₁) / n          (the SWA mean)
    s̄ₙ = s̄ₙ₋₁ + (θₙ² − s̄ₙ₋₁) / n          (the running second moment)
    Dₙ = θₙ − θ̄ₙ                           (a column of D, the last K kept: a ring buffer)

and its posterior is ``N(θ̄, ½ (Σ_diag + D Dᵀ / (K − 1)))`` with ``Σ_diag = max(s̄ − θ̄², 0)``
and K the number of columns held (``rank``, or fewer when fewer were collected). It is
never formed: a draw is ``θ̄ + √½ Σ_diag^½ z₁ + D z₂ / √(2 (K − 1))`` with
z₁ ~ N(0, I_d), z₂ ~ N(0, I_K).

MultiSWAG (Wilson & Izmailov, 2020, https://arxiv.org/abs/2002.08791) is ``members``
independent SWAG runs, the posterior their equal-weight mixture. The members are one
(M, d) tensor, updated by one vectorised gradient as ``deep_ensemble``'s are, each from
its own start (:func:`bayesflow.engines.sgmcmc.chain_starts`) with its own minibatch order
by default (``minibatches``): members differ by seed.

Temperature: the SGD iterates minimise −f, where T enters only through the prior weight
(the likelihood convention); the covariance is then scaled by T, so T = 1 is SWAG as
published, T → 0 the SWA point (every draw the mean) and T = 1/2 halves every variance.
This is a convention, not a derivation: SWAG's covariance comes from the SGD noise, not
from the tempered target.

The posterior is a sample set: ``samples`` draws per member are taken from the fit's
generator when the fit ends, the equal-weight mixture's draws in member order
(``Posterior(samples=(M·S, d))``); the evaluate stage takes its ``n_samples`` from them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from bayesflow.methods.base import (
    COMPILE_DESCRIPTION,
    MINIBATCHES_DESCRIPTION,
    Method,
    MethodBase,
    Minibatches,
    Traits,
)

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "SWAGSpec", "SWAGState", "build", "collections", "draw"]


class SWAGSpec(MethodBase):
    """SWA-Gaussian (Maddox et al., 2019): a Gaussian over SGD's iterates; MultiSWAG with members."""

    engine: Literal["swag"] = Field(description="Registry name of the engine.")
    lr: PositiveFloat = Field(0.01, description="SGD's constant learning rate.")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD's momentum (the paper's 0.9).")
    epochs: PositiveInt = Field(100, description="Passes over the training data, burn-in included.")
    burn_in: NonNegativeInt = Field(
        50, description="Epochs of SGD before the first iterate is collected."
    )
    collect_every: PositiveInt | None = Field(
        None,
        description="Collect an iterate every this many steps after the burn-in; null: "
        "once per epoch, at its end (the paper's choice).",
    )
    rank: int = Field(
        20, ge=2, description="K, the deviation columns kept (the paper's 20): the rank of "
        "the low-rank part of the covariance."
    )
    members: PositiveInt = Field(
        1, description="Independent SWAG runs (vectorised); more than 1 is MultiSWAG, the "
        "posterior their mixture."
    )
    samples: PositiveInt = Field(
        30, description="Draws per member kept as the posterior (the paper's Bayesian model "
        "averages use 30); the evaluate stage takes its `n_samples` from them."
    )
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    minibatches: Minibatches = Field("independent", description=MINIBATCHES_DESCRIPTION)
    compile: bool = Field(False, description=COMPILE_DESCRIPTION)

    @model_validator(mode="after")
    def _collects_after_burn_in(self) -> SWAGSpec:
        if self.burn_in >= self.epochs:
            raise ValueError(
                f"burn_in ({self.burn_in} epochs) leaves no epoch of the {self.epochs} to "
                "collect iterates in; make burn_in smaller than epochs"
            )
        return self


def collections(num_data: int, config: SWAGSpec) -> int:
    """How many iterates a fit collects: (epochs − burn_in) × steps per epoch / every."""
    batch = config.batch_size or num_data
    per_epoch = math.ceil(num_data / batch)
    every = config.collect_every or per_epoch
    return (config.epochs - config.burn_in) * per_epoch // every


def build(problem: Problem, tempering: Tempering, config: SWAGSpec) -> Engine:
    """SGD with momentum on −f, its iterates' moments and deviations after the burn-in.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T scales the covariance; the convention sets the prior weight c.
        config: the method's spec.

    Raises:
        StageError: the fit would collect fewer than two iterates (no deviation).
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.engines.optimize import build_step, steps_per_epoch
    from bayesflow.engines.sgmcmc import chain_starts
    from bayesflow.errors import StageError
    from bayesflow.methods.base import OptimizerSpec

    per_epoch = steps_per_epoch(problem.num_data, config.batch_size)
    every = config.collect_every or per_epoch
    if collections(problem.num_data, config) < 2:
        raise StageError(
            f"swag: {config.epochs - config.burn_in} epochs after the burn-in of "
            f"{per_epoch} steps each collect fewer than 2 iterates every {every} steps, and "
            "the covariance needs two; raise epochs, lower burn_in or collect_every"
        )
    sgd = OptimizerSpec(name="sgd", lr=config.lr, momentum=config.momentum)
    optimizer = build_step(sgd, config.epochs * per_epoch)
    gradient = chain_gradient(problem, tempering.prior_weight, compile=config.compile)
    independent = config.minibatches == "independent" and config.batch_size is not None
    streams = config.members if independent else 1
    first_collected = config.burn_in * per_epoch

    def init(params: Tensor, generator: torch.Generator) -> SWAGState:
        members = chain_starts(problem, params, config.members, generator)
        zeros = torch.zeros_like(members)
        deviations = members.new_zeros((config.members, config.rank, members.shape[1]))
        return SWAGState(
            members, optimizer.init(members), 0, 0, zeros, zeros.clone(), deviations, generator
        )

    def update(state: SWAGState, batch: Batch) -> tuple[SWAGState, dict[str, Tensor]]:
        ascent, log_posteriors = gradient(state.params, batch)
        params, optimizer_state = optimizer.step(state.params, ascent.neg_(), state.optimizer)
        step, count = state.step + 1, state.collected
        if step > first_collected and (step - first_collected) % every == 0:
            count = collect(state, params, count)
        new_state = state._replace(params=params, optimizer=optimizer_state, step=step, collected=count)
        return new_state, {"loss": -log_posteriors.mean()}

    def posterior(state: SWAGState) -> Posterior:
        if state.collected < 2:
            raise StageError(
                f"swag: {state.collected} iterates collected, and the covariance needs two; run "
                "the fit past the burn-in"
            )
        draws = draw(state, config.samples, tempering.temperature, state.generator)
        return Posterior(samples=draws.reshape(-1, draws.shape[-1]))

    return Engine(init, update, posterior, config.epochs, config.batch_size, streams)


def collect(state: SWAGState, params: Tensor, count: int) -> int:
    """Add the iterates ``params`` (M, d) to the state's moments and deviations, in place.

    Returns:
        the new number of collected iterates.
    """
    count += 1
    state.mean.add_(params - state.mean, alpha=1.0 / count)
    state.second_moment.add_(params.square() - state.second_moment, alpha=1.0 / count)
    column = (count - 1) % state.deviations.shape[1]
    state.deviations[:, column].copy_(params - state.mean)
    return count


def draw(state: SWAGState, count: int, temperature: float, generator: torch.Generator) -> Tensor:
    """``count`` draws per member (M, count, d) from ``N(θ̄, T · ½ (Σ_diag + D Dᵀ/(K − 1)))``.

    Args:
        state: a state with at least two collected iterates.
        count: draws per member.
        temperature: T, which scales the covariance.
        generator: the source of z₁ (M, count, d), then z₂ (M, count, K).
    """
    import torch

    mean = state.mean
    columns = min(state.collected, state.deviations.shape[1])
    deviations = state.deviations[:, :columns]  # (M, K, d)
    members, dimension = mean.shape
    options: dict[str, Any] = {"generator": generator, "dtype": mean.dtype, "device": generator.device}
    diagonal_noise = torch.randn((members, count, dimension), **options).to(mean.device)
    low_rank_noise = torch.randn((members, count, columns), **options).to(mean.device)
    spread = (state.second_moment - mean.square()).clamp_(min=0).sqrt_()
    scale = math.sqrt(temperature / 2)
    diagonal = diagonal_noise * spread.unsqueeze(1)
    low_rank = torch.bmm(low_rank_noise, deviations) / math.sqrt(columns - 1)
    return mean.unsqueeze(1) + scale * (diagonal + low_rank)


class SWAGState(NamedTuple):
    """The state of M SWAG runs.

    Attributes:
        params: the SGD iterates θ of every member (M, d).
        optimizer: SGD's momentum buffer and step count
            (:class:`~bayesflow.engines.optimize.OptimizerState`).
        step: update steps taken.
        collected: iterates collected (n).
        mean: θ̄ (M, d), the running mean of the collected iterates (zeros before any).
        second_moment: s̄ (M, d), the running mean of their squares.
        deviations: D (M, K, d): θᵢ − θ̄ᵢ of the last K collected, iterate i in row
            (i − 1) mod K.
        generator: the source of the posterior's draws.
    """

    params: Tensor
    optimizer: Any
    step: int
    collected: int
    mean: Tensor
    second_moment: Tensor
    deviations: Tensor
    generator: torch.Generator


METHODS = (
    Method(
        "swag", SWAGSpec,
        Traits(vectorizes=frozenset({"chains"})),
        build, label="SWAG",
    ),
)
