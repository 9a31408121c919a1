"""Priors p(θ) over the flat parameter vector.

A prior gives its log density and its diagonal precision (what a Laplace approximation
adds to the curvature); ``none`` is the flat prior of maximum likelihood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesflow.registry import Registry

__all__ = ["Prior", "PRIORS", "build_prior"]


@dataclass(frozen=True)
class Prior:
    """A factorised prior with a Gaussian (or flat) density."""

    name: str
    variance: float | None

    def log_prob(self, params: Tensor) -> Tensor:
        """log p(θ) for a flat vector θ (d,)."""
        if self.variance is None:
            return params.new_zeros(())
        dimension = params.shape[-1]
        return -0.5 * (params**2).sum(-1) / self.variance - 0.5 * dimension * math.log(
            2 * math.pi * self.variance
        )

    def precision(self, dimension: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """The diagonal precision (d,); zeros for the flat prior."""
        value = 0.0 if self.variance is None else 1.0 / self.variance
        return torch.full((dimension,), value, dtype=dtype)


PRIORS: Registry[Any] = Registry("prior")


@PRIORS.register("diag_normal")
def diag_normal(variance: float = 1.0) -> Prior:
    """N(0, variance·I)."""
    return Prior("diag_normal", variance)


@PRIORS.register("none")
def none() -> Prior:
    """A flat prior: log p(θ) = 0 (maximum likelihood)."""
    return Prior("none", None)


def build_prior(config: dict[str, Any]) -> Prior:
    """Build the prior a spec's ``prior`` section describes."""
    options = dict(config)
    return PRIORS.get(options.pop("name"))(**options)
