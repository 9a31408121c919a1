"""The prior predictive check on a tiny MLP: wide priors are confident, tiny ones uniform."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bayesflow.engines.base import Problem
from bayesflow.evaluate import PriorPredictive, prior_predictive, sample_prior
from bayesflow.likelihoods import categorical
from bayesflow.priors import Prior, diag_normal, none
from bayesflow.problem import build_problem

CLASSES = 3


def mlp_problem(prior: Prior) -> Problem:
    """A 4-16-16-3 ReLU MLP under ``prior``."""
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, CLASSES)
    )
    return build_problem(module, categorical(), prior, num_data=100)


def check(variance: float) -> PriorPredictive:
    """The prior predictive of 100 draws on 200 inputs in [0, 1]⁴ (positive, like pixels)."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.rand(200, 4, generator=generator)
    return prior_predictive(mlp_problem(diag_normal(variance)), categorical(), inputs, 100,
                            generator)


def test_wide_prior_sends_each_draw_confidently_to_one_class() -> None:
    """Variance 100: each draw puts most inputs in one class, with probability near 1."""
    metrics = check(100.0).metrics()
    assert metrics["prior_max_probability"] > 0.95
    assert metrics["prior_majority_fraction"] > 0.75


def test_tiny_prior_gives_near_uniform_probabilities() -> None:
    """Variance 1e-6: logits near 0, so every probability is near 1/C."""
    result = check(1e-6)
    assert result.metrics()["prior_max_probability"] == pytest.approx(1 / CLASSES, abs=0.01)
    assert result.probabilities.shape == (100, 200, CLASSES)


def test_class_fractions_sum_to_one_per_draw() -> None:
    """Each draw's argmax class fractions sum to 1; the majority is their maximum."""
    result = check(1.0)
    assert result.class_fractions.sum(axis=1) == pytest.approx([1.0] * 100)
    assert result.majority_fraction == pytest.approx(result.class_fractions.max(axis=1))


def test_sample_prior_has_variance_one_over_precision() -> None:
    """Draws under a prior of variance 4 have sample variance about 4."""
    problem = mlp_problem(diag_normal(4.0))
    draws = sample_prior(problem, 200, torch.Generator().manual_seed(2))
    assert draws.shape == (200, problem.dimension)
    assert draws.var().item() == pytest.approx(4.0, rel=0.05)


def test_sample_prior_refuses_a_flat_prior() -> None:
    """Maximum likelihood has no prior to draw from; the message names a fix."""
    with pytest.raises(ValueError, match="prior precision 0 .* use a proper prior"):
        sample_prior(mlp_problem(none()), 3, torch.Generator())


def test_sample_prior_draws_on_the_generators_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draws are made on the generator's device (a CUDA generator cannot fill a CPU
    tensor: the default workflow's failure on an H100), then moved to the problem's."""
    seen: list[torch.device] = []
    original = torch.randn

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs.get("device"))  # None: torch would draw on the CPU
        return original(*args, **kwargs)

    problem = mlp_problem(diag_normal(1.0))
    monkeypatch.setattr(torch, "randn", spy)
    generator = torch.Generator(device="cpu").manual_seed(0)
    draws = sample_prior(problem, 5, generator)
    assert seen == [generator.device]
    assert draws.device == problem.prior_precision.device
