"""Networks a spec can name. Each builder takes the input and output sizes first."""

from __future__ import annotations

from typing import Any

from torch import nn

from bayesflow.registry import Registry

__all__ = ["MODELS", "build_model"]

MODELS: Registry[Any] = Registry("model")

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


@MODELS.register("mlp")
def mlp(
    num_features: int, num_outputs: int, hidden: list[int] | None = None, activation: str = "relu"
) -> nn.Module:
    """A multi-layer perceptron with the given hidden widths."""
    widths = [num_features, *(hidden if hidden is not None else [64])]
    layers: list[nn.Module] = []
    for width_in, width_out in zip(widths[:-1], widths[1:]):
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


def build_model(config: dict[str, Any], num_features: int, num_outputs: int) -> nn.Module:
    """Build the model a spec's ``model`` section describes."""
    options = dict(config)
    return MODELS.get(options.pop("name"))(num_features, num_outputs, **options)
