"""The No-U-Turn sampler through pyro (``nuts``), a full-batch reference; an optional extra.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from bayesflow.methods.base import Method, MethodBase, Traits

__all__ = ["METHODS", "NUTSSpec"]


class NUTSSpec(MethodBase):
    """Full-batch No-U-Turn sampler through pyro (``nuts``; extra `bayesflow-workflows[nuts]`)."""

    engine: Literal["nuts"] = Field(description="Registry name of the engine.")
    warmup: int = Field(500, ge=0, description="Warm-up (adaptation) iterations per chain.")
    num_samples: PositiveInt = Field(1000, description="Samples kept per chain.")
    chains: PositiveInt = Field(1, description="Number of chains (run one after another).")
    target_accept: float = Field(
        0.8, gt=0, lt=1, description="Target acceptance probability of step-size adaptation."
    )
    max_tree_depth: PositiveInt = Field(10, description="Largest tree depth of a NUTS step.")


METHODS = (
    Method(
        "nuts", NUTSSpec,
        Traits(positive_temperature=True, diagnostics=frozenset({"convergence"})),
        "bayesflow.engines.nuts:build", label="NUTS",
    ),
)
