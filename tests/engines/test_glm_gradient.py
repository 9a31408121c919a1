"""The closed-form GLM gradient (:mod:`bayesflow.engines.glm`) equals ``vmap(grad)``.

Logistic and linear regression, with and without a bias, one chain and several, batches
of one per chain (the closed form) and shared (the reverse pass), one prior weight and one
per chain (a vectorised grid under the likelihood convention), in float64 against
``vmap(grad_and_value(problem.log_posterior))``; and the models it must leave alone.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.func import grad_and_value, vmap

from bayesflow.engines import glm
from bayesflow.engines.base import ChainBatch, Problem
from bayesflow.engines.gradient import chain_gradient
from bayesflow.likelihoods import bernoulli, categorical, energy, gaussian
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from tests.engines.test_gradient_flat import expected as reference  # vmap(grad_and_value)
from tests.numerics import reordered

FEATURES, ROWS = 3, 7


def regression(likelihood: str, bias: bool, dtype: torch.dtype = torch.float64) -> Problem:
    """A logistic or linear regression on FEATURES inputs under a normal prior."""
    model = nn.Linear(FEATURES, 1, bias=bias).to(dtype)
    bound = bernoulli() if likelihood == "bernoulli" else gaussian(0.3)
    return build_problem(model, bound, diag_normal(0.8), 50)


def draw(
    likelihood: str, count: int, dimension: int, seed: int, spread: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor, Tensor]:
    """Parameters (K, d), inputs (K, ROWS, FEATURES) and targets (K, ROWS) of the kind."""
    generator = torch.Generator().manual_seed(seed)
    params = spread * torch.randn(count, dimension, generator=generator, dtype=dtype)
    inputs = torch.randn(count, ROWS, FEATURES, generator=generator, dtype=dtype)
    if likelihood == "bernoulli":
        targets = torch.randint(0, 2, (count, ROWS), generator=generator)
    else:
        targets = torch.randn(count, ROWS, generator=generator, dtype=dtype)
    return params, inputs, targets


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("weights", ["shared", "per_chain"])
@pytest.mark.parametrize("batches", ["own", "shared"])
@pytest.mark.parametrize("count", [1, 4])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_the_chain_gradient_equals_the_vmap_gradient(
    likelihood: str, bias: bool, count: int, batches: str, weights: str, padded: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Gradients and values equal vmap(grad)'s to float64 rounding, whichever path runs
    (the reduction's padded batched GEMM of a CPU, or the plain product of other devices)."""
    if not padded:
        monkeypatch.setattr(glm, "PADDED_DEVICES", ())
    problem = regression(likelihood, bias)
    params, inputs, targets = draw(likelihood, count, problem.dimension, seed=count)
    batch: Any = ChainBatch(inputs, targets) if batches == "own" else (inputs[0], targets[0])
    weight: Any = 0.7 if weights == "shared" else torch.linspace(0.2, 1.0, count).double()
    grads, values = chain_gradient(problem, weight)(params, batch)
    expected = reference(problem, params, batch, weight)
    assert grads.shape == params.shape and values.shape == (count,)
    assert grads.is_contiguous()
    torch.testing.assert_close(grads, expected[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values, expected[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_the_closed_form_is_the_likelihoods_gradient(likelihood: str) -> None:
    """The closed form alone: the mean log likelihood of each chain and its gradient, for
    logits far in both tails (where a naive log σ(z) would lose digits or overflow)."""
    problem = regression(likelihood, bias=True)
    gradient = glm.glm_gradient(problem)
    assert gradient is not None
    params, inputs, targets = draw(likelihood, 5, problem.dimension, seed=3, spread=40.0)
    found = gradient(params, inputs, targets, False)
    assert found is not None

    def log_lik(theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        return problem.log_likelihood(problem.forward(theta, x), y).mean()

    expected = vmap(grad_and_value(log_lik))(params, inputs, targets)
    assert vmap(problem.forward)(params, inputs).abs().max() > 100  # the tails are reached
    assert torch.isfinite(found[1]).all()
    torch.testing.assert_close(found[0], expected[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(found[1], expected[1], rtol=1e-10, atol=1e-12)


def test_float32_matches_the_reverse_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """In float32 the closed form gives the reverse pass's numbers to float32 rounding."""
    problem = regression("bernoulli", bias=True, dtype=torch.float32)
    params, inputs, targets = draw(
        "bernoulli", 50, problem.dimension, seed=5, dtype=torch.float32
    )
    batch = ChainBatch(inputs, targets)
    fast = chain_gradient(problem, 1.0)(params, batch)
    monkeypatch.setattr(glm, "glm_gradient", lambda problem: None)
    slow = chain_gradient(problem, 1.0)(params, batch)
    torch.testing.assert_close(fast[0], slow[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast[1], slow[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "model, likelihood",
    [
        (nn.Linear(FEATURES, 2), gaussian()),  # two outputs
        (mlp(FEATURES, 1, hidden=[4]), bernoulli()),  # a hidden layer
        (nn.Sequential(nn.Linear(FEATURES, 1), nn.Tanh()), gaussian()),  # an activation
        (nn.Linear(FEATURES, 4), categorical()),
        (nn.Linear(FEATURES, 1), energy()),
    ],
)
def test_other_models_and_likelihoods_are_left_to_the_reverse_pass(
    model: nn.Module, likelihood: Any
) -> None:
    """Only one linear layer of one output under a bernoulli or gaussian likelihood."""
    problem = build_problem(model, likelihood, diag_normal(1.0), 50)
    assert glm.glm_gradient(problem) is None


def test_batches_of_another_form_are_declined() -> None:
    """A batch the closed form does not cover (targets with a trailing axis, inputs of
    another dtype, a batch of the other kind's shape) gives None, for the reverse pass."""
    problem = regression("gaussian", bias=True)
    gradient = glm.glm_gradient(problem)
    assert gradient is not None
    params, inputs, targets = draw("gaussian", 3, problem.dimension, seed=1)
    assert gradient(params, inputs, targets, False) is not None
    assert gradient(params, inputs[0], targets[0], True) is not None
    assert gradient(params, inputs, targets.unsqueeze(-1), False) is None
    assert gradient(params, inputs[0], targets[0].unsqueeze(-1), True) is None
    assert gradient(params, inputs.float(), targets, False) is None
    assert gradient(params, inputs[0], targets[0], False) is None
    assert gradient(params, inputs, targets, True) is None


def test_a_shared_batch_changed_in_place_is_read_again() -> None:
    """The shared batch's ``[x, 1]ᵀ`` and float targets are kept between calls (a full
    batch is the same tensors every step) but made again once either changes in place."""
    problem = regression("bernoulli", bias=True)
    gradient = chain_gradient(problem, 1.0)
    params, inputs, targets = draw("bernoulli", 3, problem.dimension, seed=2)
    batch = (inputs[0].clone(), targets[0].clone())
    first = gradient(params, batch)
    torch.testing.assert_close(first[0], reference(problem, params, batch, 1.0)[0])
    batch[0].mul_(2.0)
    second = gradient(params, batch)
    torch.testing.assert_close(second[0], reference(problem, params, batch, 1.0)[0])
    batch[1].copy_(1 - batch[1])
    third = gradient(params, batch)
    torch.testing.assert_close(third[0], reference(problem, params, batch, 1.0)[0])
    assert not torch.allclose(first[0], second[0]) and not torch.allclose(second[0], third[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_a_shared_batch_gives_the_reverse_pass_gradient(
    likelihood: str, bias: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a batch every chain shares, the closed form gives the reverse pass's gradient and
    values, so a seed gives the same chains as before (and K shared chains stay the
    one-chain fits, tests/engines/test_streams.py).

    The closed form runs the reverse pass's operations on the same numbers and matched it
    bit for bit where it was written; but its batched product over a (K, 2, B) buffer and
    the reverse pass's matrix product are different kernels, which another CPU (or
    ATEN_CPU_CAPABILITY) may let sum in another order: the tolerance of a reordered sum
    over the batch's rows. (Measured on the Intel Xeon of docs/portability.md: equal bit
    for bit at every kernel level, on 1 and 2 threads, for 1 to 64 chains.)"""
    problem = regression(likelihood, bias, dtype)
    params, inputs, targets = draw(likelihood, 6, problem.dimension, seed=8, dtype=dtype)
    batch = (inputs[0], targets[0])
    assert glm.glm_gradient(problem) is not None
    fast = chain_gradient(problem, 0.9)(params, batch)
    monkeypatch.setattr(glm, "glm_gradient", lambda problem: None)
    slow = chain_gradient(problem, 0.9)(params, batch)
    for ours, theirs in zip(fast, slow):
        scale = float(theirs.abs().max())
        torch.testing.assert_close(ours, theirs, **reordered(dtype, ROWS, scale=scale))
