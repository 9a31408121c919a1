"""SWAG: the collected moments and deviations against numpy on the recorded iterates, the
draws' covariance, MultiSWAG's members, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from bayesflow.engines.base import Problem
from bayesflow.errors import StageError
from bayesflow.methods.swag import SWAGSpec, SWAGState, draw
from tests.engines.helpers import CONFORMANCE_DATA, build_engine

Data = tuple[torch.Tensor, torch.Tensor]


def run_steps(engine: object, problem: Problem, data: Data, epochs: int, seed: int = 0) -> tuple[SWAGState, list[np.ndarray]]:
    """Drive ``engine`` over ``epochs`` passes in order, recording every iterate (M, d); the
    start and the members' starts come from one generator, as in the fit stage."""
    generator = torch.Generator().manual_seed(seed)
    state = engine.init(problem.init_params(generator), generator)  # type: ignore[attr-defined]
    inputs, targets = data
    iterates = []
    for _ in range(epochs):
        for start in range(0, CONFORMANCE_DATA, 8):
            state, _ = engine.update(state, (inputs[start : start + 8], targets[start : start + 8]))  # type: ignore[attr-defined]
            iterates.append(state.params.detach().clone().numpy())
    return state, iterates


def test_moments_and_deviations_equal_numpy_on_the_iterates(problem: Problem, data: Data) -> None:
    """After one burn-in epoch (3 steps), every second iterate is collected; the running
    mean, second moment and the last K deviations θᵢ − θ̄ᵢ equal numpy's, K = 3 < n = 4
    (the ring buffer wrapped)."""
    engine = build_engine(
        "swag", problem, 1.0, epochs=4, burn_in=1, collect_every=2, rank=3, members=2
    )
    state, iterates = run_steps(engine, problem, data, 4)
    collected = np.stack(iterates[3 + 1 :: 2]).astype(np.float64)  # steps 5, 7, 9, 11
    assert state.collected == len(collected) == 4
    counts = np.arange(1, 5)[:, None, None]
    running = np.cumsum(collected, axis=0) / counts
    np.testing.assert_allclose(state.mean.numpy(), collected.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.second_moment.numpy(), (collected**2).mean(0), rtol=1e-5, atol=1e-6)
    deviations = collected - running  # (n, M, d); iterate i in row (i − 1) mod 3
    expected = np.stack([deviations[3], deviations[1], deviations[2]], axis=1)
    np.testing.assert_allclose(state.deviations.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_draws_have_the_stated_covariance() -> None:
    """Draws at T = 0.5 have mean θ̄ and covariance T · ½ (diag(s̄ − θ̄²) + D Dᵀ / (K − 1))
    (200,000 draws: Monte Carlo error about 0.5% of the entries)."""
    generator = torch.Generator().manual_seed(0)
    mean = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    second = mean.square() + torch.tensor([[0.3, 0.1, 0.2]], dtype=torch.float64)
    deviations = torch.randn((1, 4, 3), generator=generator, dtype=torch.float64)
    state = SWAGState(mean, None, 0, 6, mean, second, deviations, generator)
    samples = draw(state, 200_000, 0.5, generator)[0]
    stated = 0.5 * 0.5 * (torch.diag(second[0] - mean[0] ** 2) + deviations[0].T @ deviations[0] / 3)
    torch.testing.assert_close(samples.mean(0), mean[0], rtol=0, atol=0.01)
    torch.testing.assert_close(torch.cov(samples.T), stated, rtol=0.02, atol=0.003)


def test_zero_temperature_draws_are_the_swa_mean(problem: Problem, data: Data) -> None:
    """At T = 0 every draw is the SWA mean θ̄."""
    engine = build_engine("swag", problem, 0.0)
    state, _ = run_steps(engine, problem, data, 2)
    samples = engine.posterior(state).samples
    assert samples is not None
    torch.testing.assert_close(samples, state.mean.repeat_interleave(4, dim=0))


def test_multiswag_members_are_independent_runs(problem: Problem, data: Data) -> None:
    """Members start from their own seeds' draws and differ; with shared minibatches member
    0 is exactly the one-member SWAG run from the same start."""
    many = build_engine("swag", problem, 1.0, members=3, minibatches="shared")
    one = build_engine("swag", problem, 1.0, members=1)
    state, _ = run_steps(many, problem, data, 2)
    single, _ = run_steps(one, problem, data, 2)
    assert not torch.allclose(state.mean[0], state.mean[1])
    assert not torch.allclose(state.mean[1], state.mean[2])
    torch.testing.assert_close(state.mean[:1], single.mean)
    torch.testing.assert_close(state.deviations[:1], single.deviations)
    samples = many.posterior(state).samples
    assert samples is not None and samples.shape == (3 * 4, problem.dimension)


def test_spec_refuses_burn_in_past_the_epochs() -> None:
    """A burn-in as long as the fit collects nothing: refused with the fix."""
    with pytest.raises(ValidationError, match="make burn_in smaller than epochs"):
        SWAGSpec.model_validate({"engine": "swag", "epochs": 5, "burn_in": 5})


def test_build_refuses_fewer_than_two_collections(problem: Problem) -> None:
    """One collected iterate has no deviation: refused at build, naming the settings."""
    with pytest.raises(StageError, match="fewer than 2 iterates.*raise epochs"):
        build_engine("swag", problem, 1.0, epochs=2, burn_in=1, collect_every=3)
