"""Continual learning on a language model: episodes of text windows (one document each),
a LoRA subset of a tiny config-built llama, the Laplace-as-prior update over the token
diagonal Fisher with strength λ."""

from __future__ import annotations

import math

import pytest
import torch

from bayesflow.continual import fit_continual
from bayesflow.llm import build_causal_lm
from bayesflow.llm.curvature import token_diagonal_fisher
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.text import episode_windows
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from tests.llm.conftest import tiny
from tests.numerics import reordered

LENGTH, STRIDE, SCORED, PRIOR_VARIANCE = 12, 6, 4, 0.5
DOCUMENTS = [
    "the river runs past the mill and the miller counts the sacks of grain by the door. " * 2,
    "a lighthouse keeper writes the weather in a book: wind, rain, fog, and calm nights. " * 2,
    "three cats sleep on the warm stones of the garden wall until the sun goes down. " * 2,
]


def setup(count: int) -> tuple:
    episodes = episode_windows(DOCUMENTS[:count], LENGTH, STRIDE, SCORED)
    model, names = build_causal_lm(tiny())
    problem = build_lm_problem(model, names, diag_normal(PRIOR_VARIANCE), episodes.y_train.size, SCORED)
    tensors = tuple(torch.as_tensor(array) for array in episodes[:4])
    return problem, tensors, (episodes.episode_train, episodes.episode_test)


def run(protocol: str, count: int, strength: float | None = None) -> tuple:
    problem, tensors, episodes = setup(count)
    values = {"engine": "map", "continual": protocol, "epochs": 3, "batch_size": 8,
              "optimizer": {"name": "adamw", "lr": 0.02}}
    if strength is not None:
        values["laplace_strength"] = strength
    config = METHODS.get("map").spec.model_validate(values)
    return (problem, tensors, episodes,
            fit_continual(problem, config, Tempering(1.0, problem.num_data), tensors, episodes,
                          torch.Generator().manual_seed(0)))


@pytest.mark.slow
def test_text_episodes_record_every_episode_test_nll() -> None:
    """Three documents, three episodes: the test NLL per scored token of every episode
    after each one, finite, and the average over the episodes seen."""
    for protocol in ("online", "laplace_prior", "offline", "single"):
        _, _, _, (posterior, traces, steps) = run(protocol, 3, 100.0 if protocol == "laplace_prior" else None)
        assert sorted(traces) == ["episode_nll/0", "episode_nll/1", "episode_nll/2", "seen_average_nll"]
        assert all(len(trace) == 3 and all(math.isfinite(v) for v in trace) for trace in traces.values())
        assert traces["seen_average_nll"][1] == sum(traces[f"episode_nll/{j}"][1] for j in range(2)) / 2
        assert steps > 0 and bool(posterior.mean.abs().sum() > 0)
    # Byte tokens under a random tiny model: a loss near log 256 to start with.
    assert 3 < traces["episode_nll/0"][0] < 7


def test_carried_precision_is_prior_plus_lambda_token_fisher() -> None:
    """One episode: the carried precision is 1/σ₀² + λ Σ_t g_t² at the episode's mode, the
    token Fisher over its training windows; λ = 100 against λ = 1 at the same mode."""
    found = {}
    for strength in (1.0, 100.0):
        problem, (x_train, y_train, _, _), _, (posterior, _, _) = run("laplace_prior", 1, strength)
        found[strength] = posterior
    torch.testing.assert_close(found[1.0].mean, found[100.0].mean, rtol=0, atol=0)
    fisher = token_diagonal_fisher(problem, found[1.0].mean, (x_train, y_train))
    assert float(fisher.max()) > 0
    for strength, posterior in found.items():
        expected = 1 / (1 / PRIOR_VARIANCE + strength * fisher)
        torch.testing.assert_close(posterior.var, expected,
                                   **reordered(torch.float32, 256 * LENGTH, scale=float(expected.max())))
