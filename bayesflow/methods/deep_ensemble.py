"""Deep ensembles: K optimisation runs at once, the T = 0 limit of parallel SGHMC.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from bayesflow.methods.base import Method, MethodBase, OptimizerSpec, Traits

__all__ = ["METHODS", "DeepEnsembleSpec"]


class DeepEnsembleSpec(MethodBase):
    """A deep ensemble: K optimisation runs at once, the T = 0 limit of parallel SGHMC."""

    engine: Literal["deep_ensemble"] = Field(description="Registry name of the engine.")
    members: PositiveInt = Field(5, description="Number K of ensemble members (vectorised).")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")


METHODS = (
    Method(
        "deep_ensemble", DeepEnsembleSpec,
        Traits(shares_temperature="posterior", vectorizes=frozenset({"chains"})),
        "bayesflow.engines.deep_ensemble:build",
    ),
)
