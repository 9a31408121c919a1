"""The diagonal empirical Fisher over scored tokens against a per-token autograd loop, and
the Laplace posterior built on it at two temperatures under both conventions."""

from __future__ import annotations

import pytest
import torch

from bayesflow.engines.fit import fit
from bayesflow.llm import build_causal_lm
from bayesflow.llm.curvature import build_token_fisher_laplace, token_diagonal_fisher
from bayesflow.llm.problem import build_lm_problem
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from tests.llm.conftest import tiny
from tests.numerics import reordered

LENGTH, SCORED, WINDOWS = 10, 3, 4


def setup(trainable: dict | None = None) -> tuple:
    torch.manual_seed(0)
    model, names = build_causal_lm(tiny() if trainable is None else tiny(trainable=trainable))
    problem = build_lm_problem(model, names, diag_normal(0.5), WINDOWS * SCORED, SCORED)
    windows = torch.randint(0, 256, (WINDOWS, LENGTH), generator=torch.Generator().manual_seed(2))
    params = problem.init_params(torch.Generator().manual_seed(0)) + 0.05
    return problem, params, (windows, windows[:, LENGTH - SCORED :])


def loop_fisher(problem, params, batch) -> torch.Tensor:
    """One autograd pass per scored token, its gradient squared and summed."""
    inputs, targets = batch
    total = torch.zeros_like(params)
    for i in range(inputs.shape[0]):
        for t in range(SCORED):
            leaf = params.detach().requires_grad_(True)
            log_p = problem.forward(leaf, inputs[i : i + 1])[0, t].log_softmax(-1)[targets[i, t]]
            (gradient,) = torch.autograd.grad(log_p, leaf)
            total += gradient.square()
    return total


@pytest.mark.parametrize("trainable", [None, {"parameters": ["model.layers.1.mlp.*"]}])
def test_token_fisher_matches_a_per_token_loop(trainable: dict | None) -> None:
    problem, params, batch = setup(trainable)
    expected = loop_fisher(problem, params, batch)
    found = token_diagonal_fisher(problem, params, batch)
    assert found.shape == (problem.dimension,) and float(expected.max()) > 0
    torch.testing.assert_close(found, expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))


@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_laplace_variance_is_t_over_fisher_plus_prior(temperature: float, convention: str) -> None:
    problem, params, batch = setup()
    tempering = Tempering(temperature, problem.num_data, convention)
    config = METHODS.get("laplace_diag_fisher").spec.model_validate(
        {"engine": "laplace_diag_fisher", "batch_size": 2})
    engine = build_token_fisher_laplace(problem, tempering, config)
    posterior = fit(engine, params, *batch, torch.Generator().manual_seed(0)).posterior
    fisher = loop_fisher(problem, params, batch)
    prior_weight = 1.0 if convention == "posterior" else temperature
    expected = temperature / (fisher + prior_weight / 0.5)
    torch.testing.assert_close(posterior.mean, params)
    torch.testing.assert_close(posterior.var, expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))
