"""Fixed log densities written as models, for sampling a target without data.

With the ``none`` dataset (one pseudo-datum) and the ``energy`` likelihood (log p is the
model's output), the tempered posterior of such a model is ``exp(log p(θ) / T)``: the
samplers run on a known density, as in the double-well example of the posteriors paper
(Duffield et al., 2025, Figure 2).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bayesflow.models.registry import MODELS

__all__ = ["DoubleWell", "double_well"]


class DoubleWell(nn.Module):
    """log p(θ) = −b(θ₁² − 1)² − θ₂²/2 with θ = ``self.theta`` (2,), for every input row.

    Two modes at (±1, 0) separated by a barrier of height b at the origin.
    """

    def __init__(self, barrier: float = 4.0, init_sd: float = 1.0) -> None:
        super().__init__()
        self.barrier, self.init_sd = barrier, init_sd
        self.theta = nn.Parameter(torch.empty(2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the starting point from N(0, init_sd² I)."""
        nn.init.normal_(self.theta, std=self.init_sd)

    def forward(self, inputs: Tensor) -> Tensor:
        """The log density, repeated for each of the (n, ...) inputs: (n, 1)."""
        first, second = self.theta[0], self.theta[1]
        log_density = -self.barrier * (first**2 - 1) ** 2 - 0.5 * second**2
        return log_density.expand(inputs.shape[0], 1)


@MODELS.register("double_well")
def double_well(
    num_features: int, num_outputs: int, barrier: float = 4.0, init_sd: float = 1.0
) -> nn.Module:
    """The two-dimensional double well; the data's sizes are ignored (see the module doc)."""
    return DoubleWell(barrier, init_sd)
