"""Stochastic gradient Langevin dynamics (``sgld``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

__all__ = ["METHODS", "SGLDSpec"]


class SGLDSpec(SamplerBase):
    """Stochastic gradient Langevin dynamics (``sgld``)."""

    engine: Literal["sgld"] = Field(description="Registry name of the engine.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


METHODS = (
    Method(
        "sgld", SGLDSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"configurational_temperature", "convergence"}),
        ),
        "bayesflow.engines.sgld:build",
    ),
)
