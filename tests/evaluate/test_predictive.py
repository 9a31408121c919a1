"""The sampled predictive and the evaluate entry points: samples drawn once, every number kept."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.evaluate import (
    CONVENTIONS,
    Evaluation,
    evaluate,
    evaluate_classification,
    evaluate_full,
    gaussian_nll,
    predictive_outputs,
    predictive_probabilities,
    sample_probabilities,
)
from bayesflow.likelihoods import bernoulli, categorical, gaussian
from tests.evaluate.conftest import linear_problem


def test_predictive_averages_probabilities_not_logits() -> None:
    """Logit samples (4, 0) and (0, 0) average to p₀ = (σ(4) + ½)/2, not σ(2)."""
    problem = linear_problem(1, 2)
    samples = torch.tensor([[4.0, 0.0], [0.0, 0.0]])
    inputs = torch.ones(3, 1)
    probabilities = predictive_probabilities(problem, categorical(), samples, inputs, chunk=1)
    expected = (torch.sigmoid(torch.tensor(4.0)) + 0.5) / 2
    assert probabilities[:, 0] == pytest.approx(torch.full((3,), expected.item()))
    assert abs(probabilities[0, 0].item() - torch.sigmoid(torch.tensor(2.0)).item()) > 0.1


def test_predictive_outputs_shape_and_chunking() -> None:
    """Outputs are (S, n, k) and do not depend on the chunk size."""
    problem = linear_problem(3, 2)
    generator = torch.Generator().manual_seed(0)
    samples = torch.randn(5, 6, generator=generator)
    inputs = torch.randn(4, 3, generator=generator)
    whole = predictive_outputs(problem, samples, inputs, chunk=64)
    pieces = predictive_outputs(problem, samples, inputs, chunk=2)
    assert whole.shape == (5, 4, 2)
    assert torch.allclose(whole, pieces)
    assert torch.allclose(whole[3], inputs @ samples[3].reshape(3, 2))


@pytest.mark.parametrize(
    "likelihood", [categorical(), bernoulli()], ids=["categorical", "bernoulli"]
)
def test_evaluate_classification_is_finite(likelihood) -> None:
    """``evaluate`` returns a dict of the ensemble and single-sample metrics, all finite."""
    outputs = 3 if likelihood.name == "categorical" else 1
    problem = linear_problem(2, outputs)
    generator = torch.Generator().manual_seed(1)
    posterior = Posterior(mean=torch.zeros(2 * outputs), var=torch.ones(2 * outputs))
    x_test = torch.randn(8, 2, generator=generator)
    y_test = torch.randint(0, max(outputs, 2), (8,), generator=generator)
    result = evaluate(problem, likelihood, posterior, x_test, y_test, 10, generator, ece_bins=5)
    names = {"test_nll", "test_accuracy", "test_ece", "test_brier"}
    assert isinstance(result, dict)
    assert set(result) == names | {f"{name}_single" for name in names}
    assert all(math.isfinite(value) for value in result.values())
    assert set(result) <= set(CONVENTIONS)


def test_evaluate_point_estimate_matches_metrics() -> None:
    """A mean with zero variance is evaluated as its single parameter vector."""
    problem = linear_problem(1, 2)
    posterior = Posterior(mean=torch.tensor([1.0, 0.0]), var=torch.zeros(2))
    x_test, y_test = torch.ones(2, 1), torch.tensor([0, 1])
    result = evaluate(problem, categorical(), posterior, x_test, y_test, 50, torch.Generator())
    probability = torch.sigmoid(torch.tensor(1.0)).item()
    assert result["test_nll"] == pytest.approx(
        -(math.log(probability) + math.log(1 - probability)) / 2
    )
    assert result["test_accuracy"] == pytest.approx(0.5)


def test_evaluate_regression() -> None:
    """A gaussian likelihood gives test_nll of the mixture, test_rmse of the mean, coverage."""
    problem = linear_problem(1, 1, likelihood="gaussian")
    posterior = Posterior(samples=torch.tensor([[1.0], [3.0]]))
    x_test, y_test = torch.ones(3, 1), torch.tensor([2.0, 4.0, 0.0])
    result = evaluate(
        problem, gaussian(noise_sd=1.0), posterior, x_test, y_test, 2, torch.Generator()
    )
    assert set(result) == {"test_nll", "test_rmse", "test_nll_single", "test_rmse_single",
                           "test_coverage_50", "test_coverage_90", "test_coverage_95"}
    assert set(result) <= set(CONVENTIONS)
    assert result["test_rmse"] == pytest.approx(math.sqrt(8 / 3))
    means = np.array([[1.0] * 3, [3.0] * 3])
    assert result["test_nll"] == pytest.approx(gaussian_nll(means, y_test.numpy(), 1.0))


def test_sample_probabilities_keep_the_sample_axis() -> None:
    """(S, n, C) per-sample probabilities average to the predictive."""
    problem = linear_problem(2, 3)
    generator = torch.Generator().manual_seed(2)
    samples = torch.randn(5, 6, generator=generator)
    inputs = torch.randn(4, 2, generator=generator)
    per_sample = sample_probabilities(problem, categorical(), samples, inputs, chunk=2)
    assert per_sample.shape == (5, 4, 3)
    average = predictive_probabilities(problem, categorical(), samples, inputs)
    assert torch.allclose(per_sample.mean(0), average)


def test_evaluate_full_returns_metrics_arrays_and_conventions() -> None:
    """Classification gives the ensemble and single metrics, per-point arrays and conventions."""
    problem = linear_problem(2, 3)
    generator = torch.Generator().manual_seed(3)
    posterior = Posterior(mean=torch.zeros(6), var=torch.ones(6))
    x_test = torch.randn(10, 2, generator=generator)
    y_test = torch.randint(0, 3, (10,), generator=generator)
    result = evaluate_full(problem, categorical(), posterior, x_test, y_test, 8, generator,
                           ece_bins=4, ece_binning="equal_mass")
    assert isinstance(result, Evaluation)
    names = {"test_nll", "test_accuracy", "test_ece", "test_brier"}
    assert set(result.metrics) == names | {f"{name}_single" for name in names}
    assert result.arrays["probabilities"].shape == (10, 3)
    for kind in ("total", "aleatoric", "epistemic"):
        assert result.arrays[f"uncertainty_{kind}"].shape == (10,)
    assert set(result.conventions) == set(result.metrics)
    assert result.conventions["test_ece"].startswith("4 equal-mass bins")


def test_evaluate_full_uses_one_draw_for_every_number() -> None:
    """The saved probabilities are the predictive the metrics were computed from."""
    problem = linear_problem(2, 3)
    generator = torch.Generator().manual_seed(4)
    posterior = Posterior(samples=torch.randn(7, 6, generator=generator))
    x_test = torch.randn(6, 2, generator=generator)
    y_test = torch.randint(0, 3, (6,), generator=generator)
    result = evaluate_full(problem, categorical(), posterior, x_test, y_test, 7, generator)
    probabilities = result.arrays["probabilities"]
    chosen = probabilities[np.arange(6), y_test.numpy()]
    assert result.metrics["test_nll"] == pytest.approx(-np.log(chosen).mean())


def test_point_estimate_has_no_epistemic_uncertainty() -> None:
    """A MAP posterior is one sample: EU = 0 and single-sample metrics equal the ensemble's."""
    problem = linear_problem(1, 2)
    posterior = Posterior(mean=torch.tensor([1.0, 0.0]), var=torch.zeros(2))
    x_test, y_test = torch.ones(2, 1), torch.tensor([0, 1])
    result = evaluate_full(problem, categorical(), posterior, x_test, y_test, 50,
                           torch.Generator())
    assert result.arrays["uncertainty_epistemic"] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert result.metrics["test_nll_single"] == pytest.approx(result.metrics["test_nll"])


def test_evaluate_full_scores_ood_inputs_with_the_same_samples() -> None:
    """OOD inputs far from the data, where the sampled weights disagree, get AUROC 1."""
    problem = linear_problem(1, 2)
    generator = torch.Generator().manual_seed(5)
    posterior = Posterior(mean=torch.zeros(2), var=torch.ones(2))
    x_test = torch.full((20, 1), 0.01)  # logits near 0 for every sample: little EU
    x_ood = torch.full((20, 1), 10.0)  # logits ±10·w: samples disagree confidently
    y_test = torch.zeros(20, dtype=torch.long)
    result = evaluate_full(problem, categorical(), posterior, x_test, y_test, 30, generator,
                           x_ood=x_ood)
    assert result.metrics["ood_auroc_epistemic"] == 1.0
    assert result.arrays["ood_uncertainty_epistemic"].shape == (20,)
    assert "ood_auroc_total" in result.metrics


def test_evaluate_full_regression_arrays_and_coverage() -> None:
    """Regression keeps the predictive mean, epistemic variance and PIT values."""
    problem = linear_problem(1, 1, likelihood="gaussian")
    posterior = Posterior(samples=torch.tensor([[1.0], [3.0]]))
    x_test, y_test = torch.ones(3, 1), torch.tensor([2.0, 4.0, 0.0])
    result = evaluate_full(problem, gaussian(noise_sd=1.0), posterior, x_test, y_test, 2,
                           torch.Generator(), coverage_levels=(0.5,))
    assert result.arrays["predictive_mean"] == pytest.approx([2.0, 2.0, 2.0])
    assert result.arrays["epistemic_variance"] == pytest.approx([1.0, 1.0, 1.0])
    # F(2) = ½ is inside the 50% interval; F(4) and F(0) are ≈ .91 and .09, outside.
    assert result.metrics["test_coverage_50"] == pytest.approx(1 / 3)


def test_evaluate_rejects_an_unknown_task() -> None:
    """A likelihood whose task is neither classification nor regression is refused."""
    problem = linear_problem(1, 1)
    odd = gaussian().__class__("poisson", "counting")
    posterior = Posterior(samples=torch.zeros(1, 1))
    with pytest.raises(ValueError, match="expected 'classification' or 'regression'"):
        evaluate_full(problem, odd, posterior, torch.ones(1, 1), torch.zeros(1), 1,
                      torch.Generator())


def test_linearized_prediction_equals_sampled_for_a_linear_model() -> None:
    """A model linear in θ is its own linearisation: both predictives give the same metrics."""
    problem = linear_problem(2, 3)
    posterior = Posterior(mean=torch.ones(6), var=torch.full((6,), 0.5))
    generator = torch.Generator().manual_seed(6)
    x_test = torch.randn(5, 2, generator=generator)
    y_test = torch.randint(0, 3, (5,), generator=generator)

    def run(prediction: str) -> dict[str, float]:
        return evaluate(problem, categorical(), posterior, x_test, y_test, 10,
                        torch.Generator().manual_seed(0), prediction=prediction)

    assert run("linearized") == pytest.approx(run("sampled"))


def test_evaluate_rejects_an_unknown_prediction() -> None:
    """A prediction mode other than sampled or linearized is refused by name."""
    posterior = Posterior(samples=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="prediction must be one of .*'mean_field'"):
        evaluate(linear_problem(1, 2), categorical(), posterior, torch.ones(1, 1),
                 torch.zeros(1, dtype=torch.long), 1, torch.Generator(), prediction="mean_field")


def test_evaluate_classification_takes_outputs_alone() -> None:
    """The pure step needs no model: logit samples (S, n, k) and labels suffice."""
    outputs = torch.tensor([[[5.0, -5.0]], [[-5.0, 5.0]]])  # two samples, one point
    result = evaluate_classification(outputs, categorical(), torch.tensor([0]))
    assert result.arrays["probabilities"][0] == pytest.approx([0.5, 0.5], abs=1e-6)
    assert result.arrays["uncertainty_epistemic"][0] == pytest.approx(math.log(2), abs=1e-3)
