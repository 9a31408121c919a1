"""BAOA splitting of underdamped Langevin dynamics (``baoa``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

__all__ = ["METHODS", "BAOASpec"]


class BAOASpec(SamplerBase):
    """BAOA splitting of underdamped Langevin dynamics (``baoa``)."""

    engine: Literal["baoa"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")


METHODS = (
    Method(
        "baoa", BAOASpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"kinetic_temperature", "configurational_temperature", "convergence"}),
        ),
        "bayesflow.engines.baoa:build",
    ),
)
