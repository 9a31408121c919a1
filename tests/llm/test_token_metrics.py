"""The predictive metrics of a language model on held-out windows: every scored token is a
point, checked against the model's own forward and the classification metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.evaluate import evaluate_full, metrics, tokens
from bayesflow.evaluate.uncertainty import decompose_uncertainty
from bayesflow.llm.likelihood import NextToken
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.text import token_windows
from bayesflow.priors import none
from tests.llm.spec_helpers import DOCUMENTS, tiny_lm

LENGTH, SCORED = 24, 6


@pytest.fixture(scope="module")
def setting() -> tuple[object, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A LoRA problem on byte windows, and 4 posterior samples away from the base model."""
    model, names = build_causal_lm(tiny_lm())
    inputs, targets = token_windows(list(DOCUMENTS.values()), LENGTH, 40, SCORED)
    problem = build_lm_problem(model, names, none(), targets.size, SCORED)
    generator = torch.Generator().manual_seed(3)
    samples = torch.stack([problem.init_params(generator) + 0.3 * torch.randn(problem.dimension, generator=generator)
                           for _ in range(4)])
    return problem, samples, torch.as_tensor(inputs), torch.as_tensor(targets)


def own_probabilities(problem: object, samples: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """(K, n, S, V) softmax of the model's own forward with each sample's tensors set in place."""
    model = problem.module
    values = dict(model.named_parameters())
    names, shapes = problem.param_names, problem.param_shapes  # type: ignore[attr-defined]
    saved = {name: values[name].detach().clone() for name in names}
    out = []
    with torch.no_grad():
        for sample in samples:
            for name, piece, shape in zip(names, sample.split([math.prod(s) for s in shapes]), shapes):
                values[name].copy_(piece.view(shape))
            logits = model(inputs, use_cache=False).logits.double()
            out.append(logits[:, LENGTH - SCORED - 1 : LENGTH - 1].softmax(-1))
        for name in names:
            values[name].copy_(saved[name])
    return torch.stack(out)


def test_test_nll_is_the_mean_over_tokens_of_minus_log_the_averaged_softmax(setting: object) -> None:
    problem, samples, inputs, targets = setting  # type: ignore[misc]
    result = evaluate_full(problem, NextToken(), Posterior(samples=samples), inputs, targets, 4,
                           torch.Generator().manual_seed(0))
    probs = own_probabilities(problem, samples, inputs)  # (K, n, S, V)
    mean = probs.mean(0)
    chosen = mean.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    expected = float(-chosen.log().mean())
    assert result.metrics["test_nll"] == pytest.approx(expected, rel=1e-5)
    assert result.metrics["test_perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    # the rest: the classification metrics with every scored token one point
    flat, labels = mean.reshape(-1, 256).numpy(), targets.reshape(-1).numpy()
    reference = metrics.classification_metrics(flat, labels)
    reference.update(metrics.single_sample_metrics(probs.reshape(4, -1, 256).numpy(), labels))
    for name, value in reference.items():
        assert result.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    uncertainty = decompose_uncertainty(probs.reshape(4, -1, 256).numpy())
    np.testing.assert_allclose(result.arrays["uncertainty_total"], uncertainty.total, rtol=1e-5)
    np.testing.assert_allclose(result.arrays["uncertainty_epistemic"], uncertainty.epistemic, atol=1e-6)
    assert result.arrays["labels"].shape == (targets.numel(),)
    assert "every scored token" in result.conventions["test_nll"]


def test_windows_and_samples_in_chunks_give_the_same_metrics(setting: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory budget of two windows' worth, and samples 3 at a time, split the pass; the
    numbers stay."""
    problem, samples, inputs, targets = setting  # type: ignore[misc]
    whole = evaluate_full(problem, NextToken(), Posterior(samples=samples), inputs, targets, 4,
                          torch.Generator().manual_seed(0)).metrics
    monkeypatch.setattr(tokens, "SAMPLE_CHUNK", 3)
    per_window = (3 * 4 + 1) * SCORED * 256 * 8
    monkeypatch.setenv("BAYESFLOW_MEMORY_LIMIT", str(2 * per_window))
    from bayesflow.evaluate import predictive

    calls: list[tuple[int, int]] = []
    real = predictive.predictive_outputs

    def spy(problem: object, samples: torch.Tensor, inputs: torch.Tensor, chunk: int) -> torch.Tensor:
        calls.append((samples.shape[0], inputs.shape[0]))
        return real(problem, samples, inputs, chunk)  # type: ignore[arg-type]

    monkeypatch.setattr(predictive, "predictive_outputs", spy)
    chunked = evaluate_full(problem, NextToken(), Posterior(samples=samples), inputs, targets, 4,
                            torch.Generator().manual_seed(0)).metrics
    assert inputs.shape[0] > 2 and calls[:2] == [(3, 2), (1, 2)] and len(calls) == 2 * math.ceil(inputs.shape[0] / 2)
    for name, value in whole.items():
        assert chunked[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
