"""Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

__all__ = ["METHODS", "SGHMCSpec"]


class SGHMCSpec(SamplerBase):
    """Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains."""

    engine: Literal["sghmc"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


METHODS = (
    Method(
        "sghmc", SGHMCSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"kinetic_temperature", "configurational_temperature", "convergence"}),
        ),
        "bayesflow.engines.sghmc:build",
    ),
)
