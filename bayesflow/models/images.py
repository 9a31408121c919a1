"""A small convolutional network for images given as flat features.

Datasets hand every model a matrix (n, features), so the network first reshapes each row
to an image ``[C, H, W]`` (given, or one square channel inferred from the feature count:
64 → 1×8×8 for scikit-learn's digits, 784 → 1×28×28 for MNIST), then applies
conv-ReLU-max-pool blocks and a linear head named ``fc`` (so ``parameters: ["fc.*"]``
selects the last layer).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from torch import Tensor, nn

from bayesflow.errors import SpecError
from bayesflow.models.registry import MODELS

__all__ = ["ToImage", "cnn", "resolve_image_shape"]


class ToImage(nn.Module):
    """Reshape flat rows (n, C·H·W) to images (n, C, H, W); images pass through."""

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, inputs: Tensor) -> Tensor:
        return inputs.reshape(inputs.shape[0], *self.shape)


def resolve_image_shape(num_features: int, shape: Sequence[int] | None) -> tuple[int, int, int]:
    """The image shape [C, H, W] of ``num_features`` flat features, checked or inferred."""
    if shape is None:
        side = math.isqrt(num_features)
        if side * side != num_features:
            raise SpecError(
                f"model.image_shape: the data have {num_features} features, not a square "
                "number, so the image shape cannot be inferred; set `image_shape: [C, H, W]`"
            )
        return (1, side, side)
    if len(shape) != 3 or math.prod(shape) != num_features:
        raise SpecError(
            f"model.image_shape: {list(shape)} holds {math.prod(shape)} values but the data "
            f"have {num_features} features per example; expected [C, H, W] with "
            f"C·H·W = {num_features}"
        )
    channels, height, width = shape
    return (channels, height, width)


@MODELS.register("cnn")
def cnn(
    num_features: int,
    num_outputs: int,
    image_shape: Sequence[int] | None = None,
    channels: Sequence[int] = (16, 32),
    kernel_size: int = 3,
) -> nn.Module:
    """Conv-ReLU-max-pool blocks and a linear head, for images given as flat features.

    Args:
        num_features: C·H·W.
        num_outputs: outputs of the head.
        image_shape: ``[C, H, W]``; ``None`` infers one square channel.
        channels: output channels of each block; each block halves height and width.
        kernel_size: side of every convolution kernel ("same" padding).
    """
    shape = resolve_image_shape(num_features, image_shape)
    depth, height, width = shape
    layers: OrderedDict[str, nn.Module] = OrderedDict(image=ToImage(shape))
    for block, width_out in enumerate(channels, start=1):
        if min(height, width) < 2:
            raise SpecError(
                f"model.channels: {len(channels)} blocks each halve the {shape[1]}×{shape[2]} "
                f"image; it is {height}×{width} before block {block}, too small to pool; "
                f"use at most {block - 1} blocks"
            )
        layers[f"conv{block}"] = nn.Conv2d(depth, width_out, kernel_size, padding="same")
        layers[f"relu{block}"] = nn.ReLU()
        layers[f"pool{block}"] = nn.MaxPool2d(2)
        depth, height, width = width_out, height // 2, width // 2
    layers["flatten"] = nn.Flatten()
    layers["fc"] = nn.Linear(depth * height * width, num_outputs)
    return nn.Sequential(layers)
