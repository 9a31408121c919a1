"""Every registered method honours the engine protocol (one suite for all of them).

The suite is parametrized over the registry; a method joins it with its row of
``SMALL_CONFIGS`` (:mod:`tests.engines.helpers`). What its traits claim is checked in
:mod:`test_traits`.
"""

from __future__ import annotations

import pytest
import torch

from bayesflow.engines.base import Batch, Problem
from bayesflow.engines.fit import fit
from bayesflow.errors import DivergenceError, StageError
from bayesflow.likelihoods import gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear
from bayesflow.priors import diag_normal, none
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import (
    CONFORMANCE_DATA,
    build_engine,
    make_config,
    run_small,
    starting_point,
    tensors,
)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("name", METHODS.names())
def test_round_trip(
    name: str, temperature: float, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """init → update → posterior gives a finite loss and a finite posterior of the right shape
    (at T = 0 for every method that allows it)."""
    if temperature == 0 and METHODS.get(name).traits.positive_temperature:
        pytest.skip("refuses T = 0 (its traits say so; test_traits checks the refusal)")
    engine = build_engine(name, problem, temperature)
    generator = torch.Generator().manual_seed(2)
    state = engine.init(
        starting_point(name, problem, mode, torch.Generator().manual_seed(1)), generator
    )
    inputs, targets = data
    for start in range(0, CONFORMANCE_DATA, 8):
        state, aux = engine.update(state, (inputs[start : start + 8], targets[start : start + 8]))
        assert aux["loss"].shape == () and torch.isfinite(aux["loss"])
    posterior = engine.posterior(state)
    for value in tensors(posterior).values():
        assert torch.isfinite(value).all()
        assert value.shape[-1] == problem.dimension


@pytest.mark.parametrize("name", METHODS.names())
def test_same_seed_same_result(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """Two fits under the same seed give identical posteriors."""
    first = tensors(run_small(name, problem, data, mode, seed=3))
    second = tensors(run_small(name, problem, data, mode, seed=3))
    assert first.keys() == second.keys()
    for field in first:
        assert torch.equal(first[field], second[field])


@pytest.mark.parametrize("name", METHODS.names())
def test_posterior_arrays(name: str, problem: Problem, data: Batch, mode: torch.Tensor) -> None:
    """``to_arrays`` gives samples, or a mean with a variance or covariance, and the names."""
    arrays = run_small(name, problem, data, mode, seed=0).to_arrays(problem)
    forms = [{"samples"}, {"mean", "var"}, {"mean", "cov"}]
    assert [form for form in forms if form <= arrays.keys()] != []
    assert len({"samples", "var", "cov"} & arrays.keys()) == 1
    assert tuple(arrays["param_names"]) == problem.param_names


@pytest.mark.parametrize("name", METHODS.names())
def test_fit_history_has_one_loss_per_epoch(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """``fit`` records one finite loss per pass and calls ``on_epoch`` with it."""
    seen: list[tuple[int, float]] = []
    engine = build_engine(name, problem)
    generator = torch.Generator().manual_seed(0)
    params = starting_point(name, problem, mode, generator)
    result = fit(engine, params, *data, generator, lambda *pair: seen.append(pair))
    steps_per_pass = 1 if engine.batch_size is None else 3
    assert len(result.history) == engine.passes
    assert result.steps == engine.passes * steps_per_pass
    assert [loss for _, loss in seen] == result.history
    assert [epoch for epoch, _ in seen] == list(range(1, engine.passes + 1))


def test_fit_raises_divergence_naming_epoch_and_fix(data: Batch) -> None:
    """A learning rate far too large ends in a DivergenceError naming the epoch and the fix."""
    problem = build_problem(linear(2, 1), gaussian(), diag_normal(), CONFORMANCE_DATA)
    spec = make_config("map", optimizer={"name": "sgd", "lr": 1e6}, epochs=50)
    engine = METHODS.get("map").builder()(problem, Tempering(1.0, CONFORMANCE_DATA), spec)
    inputs, targets = data
    with pytest.raises(DivergenceError, match=r"epoch \d+ \(update steps \d+-\d+\).*smaller"):
        fit(engine, torch.zeros(problem.dimension), inputs, targets.float(), torch.Generator())


def test_laplace_without_prior_or_curvature_raises() -> None:
    """A parameter with no curvature and a flat prior is an error naming the parameter."""
    problem = build_problem(linear(2, 1), gaussian(), none(), CONFORMANCE_DATA)
    engine = METHODS.get("laplace_diag_ggn").builder()(
        problem, Tempering(1.0, CONFORMANCE_DATA), make_config("laplace_diag_ggn")
    )
    state = engine.init(torch.zeros(problem.dimension), torch.Generator())
    state, _ = engine.update(state, (torch.zeros(4, 2), torch.zeros(4)))
    with pytest.raises(StageError, match=r"weight\[0\].*diag_normal"):
        engine.posterior(state)


def test_sghmc_without_samples_raises(problem: Problem, data: Batch) -> None:
    """A burn-in longer than the run is an error that says what to change."""
    engine = build_engine("sghmc", problem, burn_in=1000)
    with pytest.raises(StageError, match="lower burn_in or raise epochs"):
        fit(engine, problem.init_params(torch.Generator()), *data, torch.Generator())
