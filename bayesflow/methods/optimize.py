"""Optimisation: maximum a posteriori (``map``) and maximum likelihood (``mle``).

One fit serves every temperature: the mode of p(θ|D)^(1/T) does not move with T when
likelihood and prior are tempered together, and maximum likelihood ignores T. Both
provide the mode a Laplace method starts ``from``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from bayesflow.methods.base import Method, MethodBase, OptimizerSpec, Traits

__all__ = ["METHODS", "OptimizeSpec"]


class OptimizeSpec(MethodBase):
    """Maximum a posteriori (``map``) or maximum likelihood (``mle``) by optimisation."""

    engine: Literal["map", "mle"] = Field(description="Registry name of the engine.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    continual: Literal["online", "laplace_prior", "offline"] | None = Field(
        None,
        description="With data in episodes (`data.episodes`): `online` fits each episode in "
        "turn from the previous parameters (online SGD); `laplace_prior` also makes the "
        "previous episode's diagonal GGN Laplace posterior the next episode's prior; "
        "`offline` refits on every episode seen so far. `epochs` are per episode.",
    )


METHODS = (
    Method(
        "map", OptimizeSpec,
        Traits(shares_temperature="posterior", provides_mode=True, posterior="point"),
        "bayesflow.engines.optimize:build_map", label="MAP",
    ),
    Method(
        "mle", OptimizeSpec,
        Traits(shares_temperature="always", provides_mode=True, posterior="point", uses_prior=False),
        "bayesflow.engines.optimize:build_mle", label="MLE",
    ),
)
