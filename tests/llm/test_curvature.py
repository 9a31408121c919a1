"""The diagonal curvatures over scored tokens (the empirical Fisher, the GGN from sampled
tokens) against a per-token autograd loop and the exact GGN, and the registered Laplace
methods built on them at two temperatures under both conventions."""

from __future__ import annotations

import math

import pytest
import torch

from bayesflow.engines.evidence import mode_fit
from bayesflow.engines.evidence_prior import choose_prior
from bayesflow.engines.fit import fit
from bayesflow.errors import StageError
from bayesflow.llm import build_causal_lm
from bayesflow.llm import curvature as curvature_module
from bayesflow.llm.curvature import (
    GGN_SAMPLE_SEED,
    sampled_token_ggn,
    sampled_tokens,
    token_diagonal_fisher,
)
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


def laplace_config(engine: str, batch_size: int | None = 2):
    return METHODS.get(engine).spec.model_validate({"engine": engine, "batch_size": batch_size})


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


def test_token_fisher_in_blocks_of_tokens_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory budget that takes one scored token per backward pass: the same Fisher."""
    problem, params, batch = setup()
    whole = token_diagonal_fisher(problem, params, batch)
    monkeypatch.setenv("BAYESFLOW_MEMORY_LIMIT", "1")
    assert curvature_module.token_rows(problem, params, batch[0][:1]) == 1
    torch.testing.assert_close(token_diagonal_fisher(problem, params, batch), whole,
                               **reordered(torch.float32, 256 * LENGTH, scale=float(whole.max())))


@pytest.mark.parametrize("trainable", [None, {"parameters": ["model.layers.1.mlp.*"]}])
def test_token_fisher_matches_a_per_token_loop(trainable: dict | None) -> None:
    problem, params, batch = setup(trainable)
    expected = loop_fisher(problem, params, batch)
    found = token_diagonal_fisher(problem, params, batch)
    assert found.shape == (problem.dimension,) and float(expected.max()) > 0
    torch.testing.assert_close(found, expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))


def exact_ggn(problem, params, inputs) -> torch.Tensor:
    """``Σ_t Σ_v p_v (∇ log p_v)²``: the diagonal GGN of the softmax, one gradient per class."""

    def log_probs(flat: torch.Tensor) -> torch.Tensor:
        return problem.forward(flat, inputs).log_softmax(-1)

    jacobian = torch.func.jacrev(log_probs)(params)  # (n, S, V, d)
    with torch.no_grad():
        probabilities = log_probs(params).exp()
    return (probabilities.unsqueeze(-1) * jacobian.square()).sum((0, 1, 2))


@pytest.mark.slow
def test_sampled_ggn_is_the_fisher_of_the_sampled_tokens_and_unbiased(monkeypatch: pytest.MonkeyPatch) -> None:
    """One draw per token: exactly the empirical Fisher of the drawn tokens; over many
    draws its mean is the exact diagonal GGN (within 5 standard errors per entry)."""
    monkeypatch.setattr(curvature_module, "CPU_WINDOWS_PER_CHUNK", WINDOWS)  # the tiny model batches well
    problem, params, batch = setup()
    generator = torch.Generator().manual_seed(3)
    found = sampled_token_ggn(generator)(problem, params, batch)
    drawn = sampled_tokens(problem, params, batch[0], torch.Generator().manual_seed(3))
    expected = loop_fisher(problem, params, (batch[0], drawn))
    torch.testing.assert_close(found, expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))
    curvature = sampled_token_ggn(torch.Generator().manual_seed(4))
    draws = torch.stack([curvature(problem, params, batch) for _ in range(200)])
    exact = exact_ggn(problem, params, batch[0])
    error = draws.std(0) / math.sqrt(draws.shape[0])
    assert float(exact.max()) > 0
    assert bool(((draws.mean(0) - exact).abs() <= 5 * error + 1e-6 * float(exact.max())).all())
    assert not torch.allclose(exact, loop_fisher(problem, params, batch), rtol=0.05)  # a different matrix


@pytest.mark.parametrize("engine", ["laplace_diag_fisher", "laplace_diag_ggn"])
@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_registered_laplace_on_a_language_model(engine: str, temperature: float, convention: str) -> None:
    """The registered method's builder, as the fit stage calls it, on a next_token problem:
    variances T / (F + c/σ²) with F summed per scored token (full batch, so the sampled
    GGN's tokens are drawn once from the generator the builder seeds)."""
    problem, params, batch = setup()
    tempering = Tempering(temperature, problem.num_data, convention)
    config = laplace_config(engine, None if engine == "laplace_diag_ggn" else 2)
    built = METHODS.get(engine).builder()(problem, tempering, config)
    posterior = fit(built, params, *batch, torch.Generator().manual_seed(0)).posterior
    targets = batch[1]
    if engine == "laplace_diag_ggn":
        targets = sampled_tokens(problem, params, batch[0], torch.Generator().manual_seed(GGN_SAMPLE_SEED))
    fisher = loop_fisher(problem, params, (batch[0], targets))
    prior_weight = 1.0 if convention == "posterior" else temperature
    expected = temperature / (fisher + prior_weight / 0.5)
    torch.testing.assert_close(posterior.mean, params)
    torch.testing.assert_close(posterior.var, expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))


def test_dense_laplace_on_a_language_model_names_the_diagonal_ones() -> None:
    problem, _, _ = setup()
    config = laplace_config("laplace_dense_fisher")
    with pytest.raises(StageError, match="diagonal or Kronecker-factored only: use laplace_diag_fisher"):
        METHODS.get("laplace_dense_fisher").builder()(problem, Tempering(1.0, problem.num_data), config)


def test_laplace_evidence_reads_the_token_fisher() -> None:
    """log p(D|θ*) over every scored token + log N(θ*; 0, σ²) + (d/2) log 2π − ½ Σ log(F + 1/σ²)."""
    problem, params, batch = setup()
    built = METHODS.get("laplace_diag_fisher").builder()(problem, Tempering(1.0, problem.num_data),
                                                         laplace_config("laplace_diag_fisher"))
    state = fit(built, params, *batch, torch.Generator().manual_seed(0)).state
    fitted = mode_fit(problem, params, *batch, 2)
    _, _, metrics = choose_prior(problem, state, fitted, curvature_name="diag_fisher")
    with torch.no_grad():
        log_likelihood = float(problem.log_likelihood(problem.forward(params, batch[0]), batch[1]).double().sum())
    fisher = loop_fisher(problem, params, batch).double()
    flat = params.double()
    log_prior = float(-0.5 * (flat**2 / 0.5).sum() - 0.5 * flat.numel() * math.log(2 * math.pi * 0.5))
    expected = (log_likelihood + log_prior + 0.5 * flat.numel() * math.log(2 * math.pi)
                - 0.5 * float(torch.log(fisher + 2.0).sum()))
    assert fitted.num_data == WINDOWS and fitted.log_likelihood == pytest.approx(log_likelihood, rel=1e-5)
    assert metrics["log_evidence"] == pytest.approx(expected, rel=1e-5)
