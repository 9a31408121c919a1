"""Stochastic gradient Nosé-Hoover thermostat (``sgnht``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

__all__ = ["METHODS", "SGNHTSpec"]


class SGNHTSpec(SamplerBase):
    """Stochastic gradient Nosé-Hoover thermostat (``sgnht``)."""

    engine: Literal["sgnht"] = Field(description="Registry name of the engine.")
    alpha: float = Field(
        1.0, ge=0, description="Friction α: the noise scale and the thermostat's start."
    )
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


METHODS = (
    Method(
        "sgnht", SGNHTSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"kinetic_temperature", "configurational_temperature", "convergence"}),
        ),
        "bayesflow.engines.sgnht:build",
    ),
)
