"""Dense networks: the multi-layer perceptron and the linear models."""

from __future__ import annotations

import itertools

from torch import nn

from bayesflow.models.registry import MODELS

__all__ = ["linear", "logistic", "mlp"]

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


@MODELS.register("mlp")
def mlp(
    num_features: int, num_outputs: int, hidden: list[int] | None = None, activation: str = "relu"
) -> nn.Module:
    """A multi-layer perceptron with the given hidden widths."""
    widths = [num_features, *(hidden if hidden is not None else [64])]
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), _ACTIVATIONS[activation]()]
    layers.append(nn.Linear(widths[-1], num_outputs))
    return nn.Sequential(*layers)


@MODELS.register("linear")
def linear(num_features: int, num_outputs: int, bias: bool = True) -> nn.Module:
    """A linear map (linear regression with a gaussian likelihood)."""
    return nn.Linear(num_features, num_outputs, bias=bias)


@MODELS.register("logistic")
def logistic(num_features: int, num_outputs: int, bias: bool = True) -> nn.Module:
    """Logistic regression: a linear map to logits."""
    return nn.Linear(num_features, num_outputs, bias=bias)
