"""The chains' gradient on flat views (:mod:`bayesflow.engines.flat`) equals ``vmap(grad)``.

Every model, likelihood and prior form the fast path handles, and the forms it hands to
``vmap`` (a module it does not know, a subset problem, a hand-written ``Problem``), for a
batch every chain shares, one batch per chain, one chain, and per-chain prior weights,
in float64 against ``vmap(grad_and_value(problem.log_posterior))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.func import grad_and_value, vmap

from bayesflow.engines.base import ChainBatch, Problem
from bayesflow.engines.flat import layers_of
from bayesflow.engines.gradient import chain_gradient
from bayesflow.likelihoods import bernoulli, categorical, energy, gaussian
from bayesflow.models import mlp
from bayesflow.priors import diag_normal, laplace, none
from bayesflow.problem import build_problem

ROWS = 7


class Scaled(nn.Module):
    """A module the flat forward does not know: it must go through ``vmap``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 4)

    def forward(self, inputs: Tensor) -> Tensor:
        return 2.0 * self.inner(inputs).sin()


CASES: dict[str, Callable[[], tuple[nn.Module, Any, Any, bool]]] = {
    # name: (model, likelihood, prior, handled by the flat forward)
    "logistic": lambda: (nn.Linear(3, 1), bernoulli(), diag_normal(1.0), True),
    "mlp_relu": lambda: (mlp(3, 4, hidden=[5]), categorical(), diag_normal(0.5), True),
    "mlp_gelu_two_hidden": lambda: (
        mlp(3, 4, hidden=[5, 6], activation="gelu"), categorical(), laplace(0.7), True
    ),
    "linear_no_bias": lambda: (nn.Linear(3, 1, bias=False), gaussian(0.3), diag_normal(2.0), True),
    "tanh_regression": lambda: (
        nn.Sequential(nn.Linear(3, 5, bias=False), nn.Tanh(), nn.Linear(5, 1)),
        gaussian(1.0), none(), True,
    ),
    "energy": lambda: (
        nn.Sequential(nn.Linear(3, 4), nn.SiLU(), nn.Linear(4, 1)), energy(), diag_normal(1.0),
        True,
    ),
    "unknown_module": lambda: (Scaled(), categorical(), diag_normal(1.0), False),
}


def targets_for(likelihood: Any, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Targets of the likelihood's kind: classes, 0/1, or reals."""
    if likelihood.name == "categorical":
        return torch.randint(0, 4, shape, generator=generator)
    if likelihood.name == "bernoulli":
        return torch.randint(0, 2, shape, generator=generator)
    return torch.randn(shape, generator=generator, dtype=torch.float64)


def expected(problem: Problem, params: Tensor, batch: Any, weight: Any) -> tuple[Tensor, Tensor]:
    """``vmap(grad_and_value(f))`` over the chains: the reference."""
    def f(theta: Tensor, x: Tensor, y: Tensor, c: Any) -> Tensor:
        return problem.log_posterior(theta, (x, y), prior_weight=c)

    own = isinstance(batch, ChainBatch)
    dims = (0, 0 if own else None, 0 if own else None, 0 if isinstance(weight, Tensor) else None)
    result = vmap(grad_and_value(f), in_dims=dims)(params, batch[0], batch[1], weight)
    return result[0], result[1]


@pytest.mark.parametrize("weights", ["shared", "per_chain"])
@pytest.mark.parametrize("batches", ["shared", "own", "one_chain"])
@pytest.mark.parametrize("case", list(CASES))
def test_flat_gradient_equals_the_vmap_gradient(case: str, batches: str, weights: str) -> None:
    """Same gradients and values as vmap(grad), to float64 rounding."""
    model, likelihood, prior, handled = CASES[case]()
    problem = build_problem(model.double(), likelihood, prior, 50)
    assert (layers_of(problem) is not None) == handled
    count = 1 if batches == "one_chain" else 4
    generator = torch.Generator().manual_seed(len(case))
    params = torch.stack([problem.init_params(generator) for _ in range(count)])
    inputs = torch.randn(count, ROWS, 3, generator=generator, dtype=torch.float64)
    targets = targets_for(likelihood, (count, ROWS), generator)
    batch: Any = ChainBatch(inputs, targets) if batches == "own" else (inputs[0], targets[0])
    weight: Any = 0.7 if weights == "shared" else torch.linspace(0.2, 1.0, count).double()
    grads, values = chain_gradient(problem, weight)(params, batch)
    reference = expected(problem, params, batch, weight)
    assert grads.shape == params.shape and values.shape == (count,)
    torch.testing.assert_close(grads, reference[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values, reference[1], rtol=1e-10, atol=1e-12)


def test_a_problem_without_the_module_goes_through_vmap() -> None:
    """A hand-written Problem (no module, lambdas for the likelihood and prior): the fast
    path finds no layers, and the vmapped pieces give vmap(grad)'s numbers."""
    problem = Problem(
        forward=lambda params, inputs: inputs @ params.unsqueeze(-1),
        log_likelihood=lambda outputs, targets: -(outputs.squeeze(-1) - targets) ** 2,
        output_hessian=lambda outputs: torch.ones(outputs.shape[0], 1, 1),
        log_prior=lambda params: -(params**2).sum(),
        prior_precision=torch.ones(3),
        num_data=20,
        dimension=3,
        param_names=("w",),
        param_shapes=((3,),),
        init_params=lambda generator: torch.randn(3, generator=generator),
    )
    assert layers_of(problem) is None
    generator = torch.Generator().manual_seed(0)
    params = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    batch = (torch.randn(6, 3, generator=generator, dtype=torch.float64),
             torch.randn(6, generator=generator, dtype=torch.float64))
    grads, values = chain_gradient(problem, 1.0)(params, batch)
    reference = expected(problem, params, batch, 1.0)
    torch.testing.assert_close(grads, reference[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values, reference[1], rtol=1e-10, atol=1e-12)


def test_layers_are_read_only_when_the_parameters_are_the_problems() -> None:
    """The flat forward reads the module's layers only when its parameters are exactly the
    problem's; a problem with other parameter names (a subset) is not read."""
    problem = build_problem(mlp(3, 4, hidden=[5]), categorical(), diag_normal(1.0), 50)
    layers = layers_of(problem)
    assert layers is not None
    assert [layer if isinstance(layer, tuple) else type(layer) for layer in layers] == [
        (0, 5, 3, 15), nn.ReLU, (20, 4, 5, 40)
    ]
    renamed = Problem(**{**problem.__dict__, "param_names": ("a", "b", "c", "d")})
    assert layers_of(renamed) is None


class Branching(nn.Module):
    """A model ``vmap`` cannot run (a Python branch on a tensor's value)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 4)

    def forward(self, inputs: Tensor) -> Tensor:
        outputs = self.inner(inputs)
        return outputs if float(outputs.detach().sum()) > 0 else -outputs


def test_one_chain_runs_the_model_as_it_is() -> None:
    """One chain (MAP, VI's one draw, SGHMC K = 1) calls a model unknown to the flat
    forward without ``vmap``, so models that ``vmap`` refuses still fit as one chain."""
    problem = build_problem(Branching().double(), categorical(), diag_normal(1.0), 50)
    assert layers_of(problem) is None
    generator = torch.Generator().manual_seed(0)
    params = problem.init_params(generator).unsqueeze(0)
    batch = (torch.randn(ROWS, 3, generator=generator, dtype=torch.float64),
             torch.randint(0, 4, (ROWS,), generator=generator))
    grads, values = chain_gradient(problem, 1.0)(params, batch)
    reference = grad_and_value(lambda theta: problem.log_posterior(theta, batch))(params[0])
    torch.testing.assert_close(grads[0], reference[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values[0], reference[1], rtol=1e-10, atol=1e-12)


def test_inputs_with_more_axes_go_through_vmap() -> None:
    """An MLP applied to (n, s, f) inputs (nn.Linear on the last axis): not the flat
    forward's 2-D layout, so the vmapped model gives the numbers."""
    problem = build_problem(
        nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)).double(), gaussian(1.0),
        diag_normal(1.0), 50,
    )
    generator = torch.Generator().manual_seed(0)
    params = torch.stack([problem.init_params(generator) for _ in range(3)])
    batch = (torch.randn(ROWS, 2, 3, generator=generator, dtype=torch.float64),
             torch.randn(ROWS, 2, generator=generator, dtype=torch.float64))
    grads, values = chain_gradient(problem, 1.0)(params, batch)
    reference = expected(problem, params, batch, 1.0)
    torch.testing.assert_close(grads, reference[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values, reference[1], rtol=1e-10, atol=1e-12)


def test_targets_changed_in_place_are_converted_again() -> None:
    """The float targets kept from the last step are not reused once the integer targets
    they came from were changed in place."""
    problem = build_problem(nn.Linear(3, 1).double(), bernoulli(), diag_normal(1.0), 50)
    generator = torch.Generator().manual_seed(0)
    params = torch.stack([problem.init_params(generator) for _ in range(2)])
    inputs = torch.randn(ROWS, 3, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 2, (ROWS,), generator=generator)
    gradient = chain_gradient(problem, 1.0)
    first = gradient(params, (inputs, targets))
    targets[:] = 1 - targets
    second = gradient(params, (inputs, targets))
    reference = expected(problem, params, (inputs, targets), 1.0)
    torch.testing.assert_close(second[0], reference[0], rtol=1e-10, atol=1e-12)
    assert not torch.allclose(first[0], second[0])
