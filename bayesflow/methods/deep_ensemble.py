"""Deep ensembles (``deep_ensemble``): K optimisation runs at once.

A deep ensemble (Lakshminarayanan et al., 2017, https://arxiv.org/abs/1612.01474) is K
independent fits of the network from K random initialisations; its members are
``Posterior(samples=(K, d))``. Each member minimises the negative per-datum log
posterior of :mod:`bayesflow.temperature`, as ``map`` does::

    loss_k(θ_k; batch) = −f(θ_k; batch) = −mean log p(yᵢ|xᵢ,θ_k) − c · log p(θ_k) / N

The K members are one (K, d) tensor: their gradients come from
:func:`bayesflow.engines.gradient.chain_gradient` (one reverse pass over the members'
summed losses when each has its own minibatch), and the torchopt optimisers (sgd, adam,
adamw: element-wise rules) update the stacked tensor exactly as they would each member
alone, so there is no Python loop over members. The members are independent fits: each
its own start and, with ``minibatches: independent`` (the default), its own shuffled
minibatch order every epoch (``Engine.streams`` = K); member k is then exactly ``map``
from member k's start fed member k's order. ``minibatches: shared`` gives every member
the one order a single fit would see.

Temperature: as for ``map``, the temperature enters only through the prior weight c (1
when the whole posterior is tempered, T when only the likelihood is), so one fit serves
every temperature under the posterior convention. A deep ensemble is the T = 0 limit of
parallel SGHMC (Duffield et al., 2025, https://arxiv.org/abs/2406.00104): member 0
starts from the parameters given to ``init`` and members 1…K−1 from
``problem.init_params`` draws, exactly where ``sghmc`` with ``chains: K`` starts its
chains under the same seed (:func:`bayesflow.engines.sgmcmc.chain_starts`), so the two
can be compared member by member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, PositiveInt

from bayesflow.methods.base import (
    COMPILE_DESCRIPTION,
    MINIBATCHES_DESCRIPTION,
    Method,
    MethodBase,
    Minibatches,
    OptimizerSpec,
    Traits,
)

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "DeepEnsembleSpec", "DeepEnsembleState", "build"]


class DeepEnsembleSpec(MethodBase):
    """A deep ensemble: K optimisation runs at once, the T = 0 limit of parallel SGHMC."""

    engine: Literal["deep_ensemble"] = Field(description="Registry name of the engine.")
    members: PositiveInt = Field(5, description="Number K of ensemble members (vectorised).")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    minibatches: Minibatches = Field("independent", description=MINIBATCHES_DESCRIPTION)
    compile: bool = Field(False, description=COMPILE_DESCRIPTION)


def build(problem: Problem, tempering: Tempering, config: DeepEnsembleSpec) -> Engine:
    """K members, each minimising ``−f(θ_k)`` with the spec's torchopt optimiser.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: the convention and temperature, which set the prior weight c.
        config: the method's spec (members, optimiser, epochs, batch size, minibatches,
            compile).
    """
    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.engines.optimize import build_step, steps_per_epoch
    from bayesflow.engines.sgmcmc import chain_starts

    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_step(config.optimizer, total_steps)
    gradient = chain_gradient(problem, tempering.prior_weight, compile=config.compile)
    independent = config.minibatches == "independent" and config.batch_size is not None
    streams = config.members if independent else 1

    def init(params: Tensor, generator: torch.Generator) -> DeepEnsembleState:
        members = chain_starts(problem, params, config.members, generator)
        return DeepEnsembleState(members, optimizer.init(members), 0)

    def update(
        state: DeepEnsembleState, batch: Batch
    ) -> tuple[DeepEnsembleState, dict[str, Tensor]]:
        ascent, log_posteriors = gradient(state.params, batch)
        # The members minimise the loss −f, so its gradient is −∇f (a new tensor, which
        # the in-place step may overwrite); the (K, d) members change in place.
        params, optimizer_state = optimizer.step(state.params, ascent.neg_(), state.optimizer)
        new_state = DeepEnsembleState(params, optimizer_state, state.step + 1)
        return new_state, {"loss": -log_posteriors.mean()}

    def posterior(state: DeepEnsembleState) -> Posterior:
        return Posterior(samples=state.params)

    return Engine(init, update, posterior, config.epochs, config.batch_size, streams)


class DeepEnsembleState(NamedTuple):
    """The state of K ensemble members.

    Attributes:
        params: θ of every member (K, d).
        optimizer: the optimiser's moments over the stacked members and its step count
            (:class:`~bayesflow.engines.optimize.OptimizerState`).
        step: update steps taken.
    """

    params: Tensor
    optimizer: Any
    step: int


METHODS = (
    Method(
        "deep_ensemble", DeepEnsembleSpec,
        Traits(shares_temperature="posterior", vectorizes=frozenset({"chains"})),
        build,
    ),
)
