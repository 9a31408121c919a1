"""Predictive metrics against hand-computed values."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from bayesflow.evaluate import (
    CONVENTIONS,
    accuracy,
    brier,
    classification_metrics,
    describe,
    ece,
    gaussian_nll,
    interval_coverage,
    nll,
    predictive_cdf,
    regression_metrics,
    rmse,
    single_sample_metrics,
)

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


# Confidences .95, .9, .85, .6 with the third wrong: equal-width and equal-mass bins differ.
SPREAD_PROBS = np.array([[0.95, 0.05], [0.9, 0.1], [0.85, 0.15], [0.6, 0.4]])
SPREAD_LABELS = np.array([0, 0, 1, 0])


def test_ece_equal_width_two_bins_holds_all_in_one() -> None:
    """All four confidences fall in (.5, 1]: acc .75, conf .825, ECE .075."""
    assert ece(SPREAD_PROBS, SPREAD_LABELS, bins=2) == pytest.approx(0.075)


def test_ece_equal_mass_hand_computed() -> None:
    """The median edge .875 splits {.6, .85} (acc .5, conf .725) from {.9, .95} (acc 1, conf .925).

    ECE = .5 · .225 + .5 · .075 = .15.
    """
    value = ece(SPREAD_PROBS, SPREAD_LABELS, bins=2, binning="equal_mass")
    assert value == pytest.approx(0.15)


def test_ece_equal_mass_does_not_depend_on_order() -> None:
    """Tied confidences share a bin, so shuffling the points leaves ECE unchanged."""
    generator = np.random.default_rng(0)
    probs = np.repeat(np.array([[0.6, 0.4], [0.8, 0.2], [0.9, 0.1]]), 5, axis=0)
    labels = generator.integers(0, 2, size=15)
    order = generator.permutation(15)
    first = ece(probs, labels, bins=4, binning="equal_mass")
    assert ece(probs[order], labels[order], bins=4, binning="equal_mass") == pytest.approx(first)


def test_ece_rejects_unknown_binning() -> None:
    """A binning scheme outside equal_width / equal_mass is refused by name."""
    with pytest.raises(ValueError, match="binning must be one of .*'quantile'"):
        ece(PROBS, LABELS, binning="quantile")


def test_classification_metrics_names_and_values() -> None:
    """The dict holds the four summary metrics under their logged names."""
    values = classification_metrics(PROBS, LABELS, bins=2)
    assert values == pytest.approx(
        {"test_nll": nll(PROBS, LABELS), "test_accuracy": 0.5, "test_ece": 0.1, "test_brier": 0.485}
    )


def test_single_sample_metrics_average_each_sample() -> None:
    """A certain-and-right sample and a uniform one: single NLL (0 + log 2)/2, accuracy .75.

    Brier: 0 and .5, mean .25; the ensemble (.75 on the label) would give NLL −log .75.
    """
    certain = np.array([[1.0, 0.0], [0.0, 1.0]])
    uniform = np.full((2, 2), 0.5)
    single = single_sample_metrics(np.stack([certain, uniform]), np.array([0, 1]))
    assert single["test_nll_single"] == pytest.approx(math.log(2) / 2)
    assert single["test_accuracy_single"] == pytest.approx(0.75)
    assert single["test_brier_single"] == pytest.approx(0.25)
    assert set(single) == {"test_nll_single", "test_accuracy_single", "test_ece_single",
                           "test_brier_single"}


def test_single_sample_metrics_of_one_sample_are_the_ensemble_ones() -> None:
    """With S = 1 every single-sample metric equals its ensemble counterpart."""
    single = single_sample_metrics(PROBS[None], LABELS, bins=2)
    ensemble = classification_metrics(PROBS, LABELS, bins=2)
    assert single == pytest.approx({f"{name}_single": value for name, value in ensemble.items()})


def test_predictive_cdf_of_a_mixture() -> None:
    """Components at −1 and 1 (σ = 1): F(0) = (Φ(1) + Φ(−1))/2 = .5 and F(1) = (Φ(2) + .5)/2."""
    means = np.array([[-1.0, -1.0], [1.0, 1.0]])
    phi_2 = 0.5 * (1 + math.erf(2 / math.sqrt(2)))
    values = predictive_cdf(means, np.array([0.0, 1.0]), 1.0)
    assert values == pytest.approx([0.5, (phi_2 + 0.5) / 2])


def test_interval_coverage_hand_computed() -> None:
    """N(0, 1) predictive, targets .5, 1, 2: |F − ½| = .191, .341, .477.

    The 50% interval (half-width .25 in F) holds one, the 90% (.45) and 95% (.475) two,
    the 99% (.495) all three.
    """
    coverage = interval_coverage(np.zeros((1, 3)), np.array([0.5, 1.0, 2.0]), 1.0,
                                 levels=(0.5, 0.9, 0.95, 0.99))
    assert coverage == pytest.approx([1 / 3, 2 / 3, 2 / 3, 1.0])


def test_interval_coverage_is_calibrated_for_the_true_predictive() -> None:
    """Targets drawn from the predictive itself are covered at the nominal rates."""
    generator = np.random.default_rng(0)
    centres = generator.choice([-2.0, 2.0], size=20_000)
    targets = centres + generator.standard_normal(20_000)
    means = np.full((2, 20_000), -2.0)
    means[1] = 2.0  # the mixture ½N(−2, 1) + ½N(2, 1) at every point
    coverage = interval_coverage(means, targets, 1.0, levels=(0.5, 0.9, 0.95))
    assert coverage == pytest.approx([0.5, 0.9, 0.95], abs=0.01)


def test_interval_coverage_rejects_levels_outside_unit_interval() -> None:
    """A level of 90 (a percentage) is refused."""
    with pytest.raises(ValueError, match=r"levels must lie in \(0, 1\)"):
        interval_coverage(np.zeros((1, 3)), np.zeros(3), 1.0, levels=(90,))


def test_regression_metrics_names() -> None:
    """Regression gives NLL, RMSE, their single-sample versions and one coverage per level."""
    values = regression_metrics(np.zeros((2, 3)), np.zeros(3), 1.0, levels=(0.5, 0.9, 0.975))
    assert set(values) == {"test_nll", "test_rmse", "test_nll_single", "test_rmse_single",
                           "test_coverage_50", "test_coverage_90", "test_coverage_97.5"}


def test_regression_single_sample_rmse_is_the_mean_over_samples() -> None:
    """Samples [1,1] and [3,3] against targets [2,2]: each RMSE 1, the mean's RMSE 0."""
    values = regression_metrics(np.array([[1.0, 1.0], [3.0, 3.0]]), np.array([2.0, 2.0]), 1.0)
    assert values["test_rmse_single"] == pytest.approx(1.0)
    assert values["test_rmse"] == pytest.approx(0.0)


def test_convention_keys_are_valid_mlflow_names() -> None:
    """Every key is logged as an MLflow tag: letters, digits, _ - . / and spaces only."""
    assert all(re.fullmatch(r"[\w\-./ ]+", key) for key in CONVENTIONS)


def test_describe_writes_in_the_ece_settings() -> None:
    """The logged ECE convention names the bins and scheme the evaluation used."""
    described = describe(["test_ece", "test_coverage_80", "kinetic_temperature/0.weight"],
                         ece_bins=15, ece_binning="equal_mass")
    assert described["test_ece"].startswith("15 equal-mass bins")
    assert "central 80% interval" in described["test_coverage_80"]
    assert described["kinetic_temperature/0.weight"] == CONVENTIONS["kinetic_temperature"]
