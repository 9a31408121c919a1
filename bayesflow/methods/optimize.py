"""Point estimates by optimisation: maximum a posteriori (``map``) and likelihood (``mle``).

Both engines run torchopt's optimisers, as :mod:`bayesflow.engines.optimize`'s in-place
step, on the flat parameter vector θ and minimise the negative per-datum log posterior of :mod:`bayesflow.temperature`::

    loss(θ; batch) = −f(θ; batch) = −mean log p(yᵢ|xᵢ,θ) − c · log p(θ) / N

with ``c = tempering.prior_weight`` for ``map`` (1 when the whole posterior is tempered,
``T`` when only the likelihood is) and ``c = 0`` for ``mle``. The mode of the tempered
target ``exp(f / 𝒯)`` does not depend on 𝒯, so the temperature enters only through
``c``: one fit serves every temperature (``map`` under the posterior convention, ``mle``
always). The posterior is a point mass, ``Posterior(mean=θ, var=0)``, the mode a
Laplace method starts ``from``.

The optimisers and schedules are those of :mod:`bayesflow.engines.optimize` (torchopt;
Ren et al., 2023, https://arxiv.org/abs/2211.06934).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, PositiveFloat, PositiveInt

from bayesflow.methods.base import Method, MethodBase, OptimizerSpec, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "OptimizeSpec", "OptimizeState", "build", "build_map", "build_mle"]


class OptimizeSpec(MethodBase):
    """Maximum a posteriori (``map``) or maximum likelihood (``mle``) by optimisation."""

    engine: Literal["map", "mle"] = Field(description="Registry name of the engine.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    continual: Literal["online", "laplace_prior", "offline", "single"] | None = Field(
        None,
        description="With data in episodes (`data.episodes`): `online` fits each episode in "
        "turn from the previous parameters (online SGD); `laplace_prior` also makes the "
        "previous episode's diagonal GGN Laplace posterior (on a language model, the diagonal "
        "empirical Fisher over scored tokens) the next episode's prior; "
        "`offline` refits on every episode seen so far; `single` fits each episode alone from "
        "the initial parameters (the single-episode baseline). `epochs` are per episode.",
    )
    laplace_strength: PositiveFloat | None = Field(
        None,
        description="λ of `continual: laplace_prior` (only there): the next episode's prior "
        "precision is the previous one plus λ times the episode's diagonal curvature (GGN; on "
        "a language model the empirical Fisher over scored tokens). null means 1, sequential "
        "Bayesian updating; the posteriors library's continual LoRA example uses 100.",
    )


def build(problem: Problem, prior_weight: float, config: OptimizeSpec) -> Engine:
    """Gradient descent on ``−f(θ) = −mean log p(y|x,θ) − prior_weight · log p(θ) / N``.

    Args:
        problem: the model, likelihood, prior and data size.
        prior_weight: ``c``, the weight of the prior term (0 for maximum likelihood).
        config: the method's spec (optimiser, epochs, batch size).
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.engines.optimize import build_step, steps_per_epoch

    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    optimizer = build_step(config.optimizer, total_steps)

    # One chain's gradient as deep_ensemble's K: the forward on flat views, one reverse
    # pass over the likelihood and, under a normal prior, its gradient added in closed
    # form in place (no autograd through the prior's d-vectors: less memory at large d).
    gradient = chain_gradient(problem, prior_weight)

    def init(params: Tensor, generator: torch.Generator) -> OptimizeState:
        # The optimisation is deterministic given the batches; the generator is unused.
        # The state's own copy, which every step then updates in place.
        params = params.detach().clone()
        return OptimizeState(params, optimizer.init(params), 0)

    def update(state: OptimizeState, batch: Batch) -> tuple[OptimizeState, dict[str, Tensor]]:
        ascent, values = gradient(state.params.unsqueeze(0), batch)
        # The loss is −f: its gradient −∇f, a new tensor the step may overwrite.
        params, optimizer_state = optimizer.step(state.params, ascent[0].neg_(), state.optimizer)
        return OptimizeState(params, optimizer_state, state.step + 1), {"loss": -values[0]}

    def posterior(state: OptimizeState) -> Posterior:
        return Posterior(mean=state.params, var=torch.zeros_like(state.params))

    return Engine(init, update, posterior, config.epochs, config.batch_size)


def build_map(problem: Problem, tempering: Tempering, config: OptimizeSpec) -> Engine:
    """Maximum a posteriori estimate by optimisation (a point mass at the mode)."""
    return build(problem, tempering.prior_weight, config)


def build_mle(problem: Problem, tempering: Tempering, config: OptimizeSpec) -> Engine:
    """Maximum likelihood estimate by optimisation (the prior is ignored)."""
    return build(problem, 0.0, config)


class OptimizeState(NamedTuple):
    """The state of a point-estimate fit.

    Attributes:
        params: the current estimate θ (d,).
        optimizer: the optimiser's moments and step count
            (:class:`~bayesflow.engines.optimize.OptimizerState`).
        step: update steps taken.
    """

    params: Tensor
    optimizer: Any
    step: int


METHODS = (
    Method(
        "map", OptimizeSpec,
        Traits(shares_temperature="posterior", provides_mode=True, posterior="point"),
        build_map, label="MAP",
    ),
    Method(
        "mle", OptimizeSpec,
        Traits(
            shares_temperature="always", provides_mode=True, posterior="point", uses_prior=False
        ),
        build_mle, label="MLE",
    ),
)
