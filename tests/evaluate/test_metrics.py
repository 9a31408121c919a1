"""Predictive metrics against hand-computed values, and the sampled predictive."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesflow.engines.base import Posterior, Problem
from bayesflow.evaluate import (
    CONVENTIONS,
    accuracy,
    brier,
    ece,
    evaluate,
    gaussian_nll,
    nll,
    predictive_outputs,
    predictive_probabilities,
    rmse,
)
from bayesflow.likelihoods import bernoulli, categorical, gaussian

# Four points, three classes. Argmax per row: 0, 1, 2, 0 (the tie in row 4 goes to 0).
PROBS = np.array(
    [
        [0.7, 0.2, 0.1],
        [0.1, 0.6, 0.3],
        [0.2, 0.3, 0.5],
        [0.4, 0.4, 0.2],
    ]
)
LABELS = np.array([0, 2, 2, 1])


def linear_problem(inputs_dim: int, outputs_dim: int, likelihood: str = "categorical") -> Problem:
    """outputs = inputs @ params.reshape(inputs_dim, outputs_dim); no prior."""
    dimension = inputs_dim * outputs_dim
    return Problem(
        forward=lambda params, inputs: inputs @ params.reshape(inputs_dim, outputs_dim),
        log_likelihood=lambda outputs, targets: torch.zeros(outputs.shape[0]),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], outputs_dim, outputs_dim),
        log_prior=lambda params: torch.zeros(()),
        prior_precision=torch.zeros(dimension),
        num_data=4,
        dimension=dimension,
        param_names=("weight",),
        param_shapes=((inputs_dim, outputs_dim),),
        init_params=lambda generator: torch.zeros(dimension),
        likelihood=likelihood,
    )


def test_nll_hand_computed() -> None:
    """NLL is the mean of −log p̄ of the true labels: −(log .7 + log .3 + log .5 + log .4)/4."""
    expected = -(math.log(0.7) + math.log(0.3) + math.log(0.5) + math.log(0.4)) / 4
    assert nll(PROBS, LABELS) == pytest.approx(expected)


def test_nll_is_finite_for_zero_probability() -> None:
    """A zero probability on the label is clipped at 1e-12, giving −log 1e-12."""
    assert nll(np.array([[1.0, 0.0]]), np.array([1])) == pytest.approx(-math.log(1e-12))


def test_accuracy_hand_computed() -> None:
    """Argmax 0,1,2,0 against labels 0,2,2,1: two of four correct."""
    assert accuracy(PROBS, LABELS) == pytest.approx(0.5)


def test_brier_hand_computed() -> None:
    """Brier sums squared errors over classes and averages over points.

    Row 1: .3² + .2² + .1² = .14; row 2: .1² + .6² + .7² = .86;
    row 3: .2² + .3² + .5² = .38; row 4: .4² + .6² + .2² = .56; mean 1.94 / 4 = .485.
    """
    assert brier(PROBS, LABELS) == pytest.approx(0.485)


def test_ece_hand_computed_ten_bins() -> None:
    """Confidences .7, .6, .5, .4 fall in four bins, each alone.

    Gaps: |1 − .7| = .3, |0 − .6| = .6, |1 − .5| = .5, |0 − .4| = .4; ECE = 1.8 / 4 = .45.
    """
    assert ece(PROBS, LABELS, bins=10) == pytest.approx(0.45)


def test_ece_hand_computed_two_bins() -> None:
    """Two bins: (0, .5] holds .5 (right) and .4 (wrong), (.5, 1] holds .7 (right), .6 (wrong).

    Low bin: acc .5, conf .45, weight .5 → .025; high bin: acc .5, conf .65 → .075; total .1.
    """
    assert ece(PROBS, LABELS, bins=2) == pytest.approx(0.1)


def test_ece_perfectly_calibrated_is_zero() -> None:
    """Four points at confidence .75 with three right, and two certain and right: ECE 0."""
    probs = np.array([[0.75, 0.25]] * 4 + [[1.0, 0.0]] * 2)
    labels = np.array([0, 0, 0, 1, 0, 0])
    assert ece(probs, labels) == pytest.approx(0.0, abs=1e-12)


def test_ece_bin_edge_is_right_closed() -> None:
    """Confidence .3 shares bin (.2, .3] with confidence .25, not bin (.3, .4].

    Same bin: acc (1 + 0)/2 = .5, conf .275, ECE .225 (separate bins would give .475).
    """
    probs = np.array([[0.3, 0.3, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25]])
    assert ece(probs, np.array([0, 1])) == pytest.approx(0.225)


def test_metrics_accept_torch_tensors() -> None:
    """Tensors and arrays give the same numbers."""
    tensor_probs, tensor_labels = torch.tensor(PROBS), torch.tensor(LABELS)
    assert nll(tensor_probs, tensor_labels) == pytest.approx(nll(PROBS, LABELS))
    assert ece(tensor_probs, tensor_labels) == pytest.approx(ece(PROBS, LABELS))


def test_rmse_of_predictive_mean() -> None:
    """Per-sample means [1,2,3] and [3,2,1] average to [2,2,2]; errors 0, 2, −2; √(8/3)."""
    means = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    assert rmse(means, np.array([2.0, 4.0, 0.0])) == pytest.approx(math.sqrt(8 / 3))


def test_gaussian_nll_of_mixture() -> None:
    """Point 1: both components at distance 1, −log φ(1) = ½ + ½ log 2π.

    Point 2: components at distance 0 and 2, −log[(φ(0) + φ(2))/2] = ½ log 2π − log((1 + e⁻²)/2).
    """
    means = np.array([[0.0, 0.0], [2.0, 2.0]])  # (S=2, n=2), targets 1 and 0
    first = 0.5 + 0.5 * math.log(2 * math.pi)
    second = 0.5 * math.log(2 * math.pi) - math.log((1 + math.exp(-2)) / 2)
    value = gaussian_nll(means, np.array([1.0, 0.0]), noise_sd=1.0)
    assert value == pytest.approx((first + second) / 2)


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
    """A Gaussian posterior gives the four classification metrics, all finite."""
    outputs = 3 if likelihood.name == "categorical" else 1
    problem = linear_problem(2, outputs)
    generator = torch.Generator().manual_seed(1)
    posterior = Posterior(mean=torch.zeros(2 * outputs), var=torch.ones(2 * outputs))
    x_test = torch.randn(8, 2, generator=generator)
    y_test = torch.randint(0, max(outputs, 2), (8,), generator=generator)
    result = evaluate(problem, likelihood, posterior, x_test, y_test, 10, generator, ece_bins=5)
    assert set(result) == {"test_nll", "test_accuracy", "test_ece", "test_brier"}
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
    """A gaussian likelihood gives test_nll of the mixture and test_rmse of the mean."""
    problem = linear_problem(1, 1, likelihood="gaussian")
    posterior = Posterior(samples=torch.tensor([[1.0], [3.0]]))
    x_test, y_test = torch.ones(3, 1), torch.tensor([2.0, 4.0, 0.0])
    result = evaluate(
        problem, gaussian(noise_sd=1.0), posterior, x_test, y_test, 2, torch.Generator()
    )
    assert set(result) == {"test_nll", "test_rmse"}
    assert result["test_rmse"] == pytest.approx(math.sqrt(8 / 3))
    means = np.array([[1.0] * 3, [3.0] * 3])
    assert result["test_nll"] == pytest.approx(gaussian_nll(means, y_test.numpy(), 1.0))
