"""The LSTM's fused path (torch.lstm, outside vmap) equals its step-by-step form."""

from __future__ import annotations

import torch

from bayesflow.models import text
from bayesflow.models.text import LSTM


def stepwise(layer: LSTM, inputs: torch.Tensor) -> torch.Tensor:
    """The step-by-step form, forced (as under vmap)."""
    original = text._under_vmap
    text._under_vmap = lambda: True
    try:
        return layer(inputs)
    finally:
        text._under_vmap = original


def test_fused_equals_stepwise_in_value_and_gradient() -> None:
    torch.manual_seed(0)
    layer = LSTM(5, 3).double()
    inputs = torch.randn(4, 7, 5, dtype=torch.float64, requires_grad=True)
    fused, loop = layer(inputs), stepwise(layer, inputs)
    torch.testing.assert_close(fused, loop, rtol=1e-10, atol=1e-12)
    fused_grads = torch.autograd.grad(fused.square().sum(), [inputs, *layer.parameters()])
    loop_grads = torch.autograd.grad(loop.square().sum(), [inputs, *layer.parameters()])
    for a, b in zip(fused_grads, loop_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_vmap_takes_the_stepwise_form_and_agrees_with_the_fused_one() -> None:
    """Under vmap over stacked weights (parallel chains) the vectorisable form runs, and
    each chain's output equals the fused layer with that chain's weights."""
    torch.manual_seed(1)
    layer = LSTM(5, 3).double()
    inputs = torch.randn(4, 6, 5, dtype=torch.float64)
    stacked = {name: torch.stack([p.detach() + 0.1 * k for k in range(3)]) for name, p in layer.named_parameters()}
    assert not text._under_vmap()
    seen: list[bool] = []

    def one(params: dict[str, torch.Tensor]) -> torch.Tensor:
        seen.append(text._under_vmap())
        return torch.func.functional_call(layer, params, (inputs,))

    batched = torch.func.vmap(one)(stacked)
    assert seen == [True]
    for k in range(3):
        fused = torch.func.functional_call(layer, {n: v[k] for n, v in stacked.items()}, (inputs,))
        torch.testing.assert_close(batched[k], fused, rtol=1e-10, atol=1e-12)


def test_grad_transform_uses_the_fused_path_with_the_same_gradient() -> None:
    """torch.func.grad (one chain's gradient) is no vmap: the fused kernel runs under it."""
    torch.manual_seed(2)
    layer = LSTM(4, 2).double()
    inputs = torch.randn(3, 5, 4, dtype=torch.float64)
    params = {name: p.detach() for name, p in layer.named_parameters()}

    def loss(values: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.func.functional_call(layer, values, (inputs,)).square().sum()

    fused = torch.func.grad(loss)(params)
    original = text._under_vmap
    text._under_vmap = lambda: True
    try:
        loop = torch.func.grad(loss)(params)
    finally:
        text._under_vmap = original
    for name in params:
        torch.testing.assert_close(fused[name], loop[name], rtol=1e-9, atol=1e-11)
