"""Agreement, total variation and W2 of a predictive against a reference predictive:
hand-computed tables, torchmetrics (agreement is the accuracy of the argmax against the
reference's argmax; total variation is C/2 times the mean absolute error) and, for W2,
the quantile-function integral of SciPy's normal distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from bayesflow.evaluate.agreement import (
    agreement,
    compare_predictives,
    gaussian_wasserstein_2,
    total_variation,
)

# Three points, three classes; the reference's argmax is 0, 1, 2, the predictive's 0, 2, 2.
PREDICTIVE = np.array([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]])
REFERENCE = np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.0, 0.2, 0.8]])


def test_agreement_counts_the_points_whose_argmax_matches() -> None:
    """Two of three points agree; a predictive agrees with itself everywhere."""
    assert agreement(PREDICTIVE, REFERENCE) == pytest.approx(2 / 3, rel=1e-15)
    assert agreement(REFERENCE, REFERENCE) == 1.0


def test_total_variation_by_hand() -> None:
    """½Σ|p − q| per point: 0.1, 0.2 and 0.1, whose mean is 0.4/3; 0 against itself."""
    assert total_variation(PREDICTIVE, REFERENCE) == pytest.approx(0.4 / 3, rel=1e-12)
    assert total_variation(REFERENCE, REFERENCE) == 0.0


def test_total_variation_of_disjoint_and_uniform_tables() -> None:
    """Closed forms: disjoint supports are 1 apart; a one-hot table is 1 − 1/C from uniform."""
    one_hot = np.eye(4)
    assert total_variation(one_hot, np.roll(one_hot, 1, axis=1)) == pytest.approx(1.0, rel=1e-15)
    assert total_variation(one_hot, np.full((4, 4), 0.25)) == pytest.approx(0.75, rel=1e-15)


def test_ties_go_to_the_lowest_class_as_in_argmax() -> None:
    """A tie [0.5, 0.5] picks class 0, so it agrees with a reference that prefers class 0."""
    assert agreement([[0.5, 0.5]], [[0.9, 0.1]]) == 1.0
    assert agreement([[0.5, 0.5]], [[0.1, 0.9]]) == 0.0


@pytest.mark.parametrize("classes", [2, 10])
def test_agree_with_torchmetrics(classes: int) -> None:
    """On random tables: agreement is torchmetrics' multiclass accuracy of the argmax against
    the reference's argmax; total variation is C/2 times its mean absolute error."""
    from torchmetrics.functional import accuracy, mean_absolute_error

    generator = np.random.default_rng(classes)
    predictive = generator.dirichlet(np.ones(classes), size=500)
    reference = generator.dirichlet(np.ones(classes), size=500)
    expected_agreement = accuracy(
        torch.as_tensor(predictive), torch.as_tensor(reference.argmax(axis=1)),
        task="multiclass", num_classes=classes,
    )
    assert agreement(predictive, reference) == pytest.approx(float(expected_agreement), abs=1e-6)
    expected_tv = classes / 2 * mean_absolute_error(torch.as_tensor(predictive), torch.as_tensor(reference))
    assert total_variation(predictive, reference) == pytest.approx(float(expected_tv), rel=1e-12)


def test_total_variation_is_one_minus_the_overlap() -> None:
    """The identity ½Σ|p − q| = 1 − Σ min(p, q) for probability vectors, on random tables."""
    generator = np.random.default_rng(0)
    predictive, reference = generator.dirichlet(np.ones(5), size=(2, 300))
    overlap = np.minimum(predictive, reference).sum(axis=1)
    assert total_variation(predictive, reference) == pytest.approx(float(np.mean(1 - overlap)), rel=1e-12)


def _quantile_w2(mean: float, sd: float, reference_mean: float, reference_sd: float) -> float:
    """W2 by its definition in one dimension: √∫₀¹ (F⁻¹(u) − G⁻¹(u))² du."""
    def integrand(u: float) -> float:
        return float(stats.norm.ppf(u, mean, sd) - stats.norm.ppf(u, reference_mean, reference_sd)) ** 2

    value, _ = integrate.quad(integrand, 0, 1, limit=200)
    return float(np.sqrt(value))


def test_gaussian_w2_matches_the_quantile_integral() -> None:
    """The closed form against SciPy's quantile functions integrated numerically, per
    point, and the mean over points."""
    means, sds = np.array([0.0, 1.5, -2.0]), np.array([1.0, 0.5, 2.0])
    reference_means, reference_sds = np.array([0.5, 1.0, -2.0]), np.array([1.0, 1.5, 0.7])
    expected = [_quantile_w2(*values) for values in zip(means, sds, reference_means, reference_sds)]
    assert gaussian_wasserstein_2(means, sds**2, reference_means, reference_sds**2) == pytest.approx(
        float(np.mean(expected)), rel=1e-6
    )


def test_gaussian_w2_special_cases() -> None:
    """Equal variances: the distance of the means; equal means: of the standard deviations."""
    assert gaussian_wasserstein_2([0.0], [4.0], [3.0], [4.0]) == pytest.approx(3.0, rel=1e-15)
    assert gaussian_wasserstein_2([1.0], [1.0], [1.0], [9.0]) == pytest.approx(2.0, rel=1e-15)


def test_compare_predictives_picks_the_scores_by_what_both_hold() -> None:
    """Probabilities give agreement and total variation; means and variances give W2;
    mixed inputs are refused, as are tables of two shapes."""
    scores = compare_predictives({"probabilities": PREDICTIVE}, {"probabilities": REFERENCE})
    assert set(scores) == {"agreement", "total_variation"}
    gaussian = {"mean": np.zeros(2), "variance": np.ones(2)}
    assert compare_predictives(gaussian, gaussian) == {"wasserstein_2": 0.0}
    with pytest.raises(ValueError, match="both to hold"):
        compare_predictives({"probabilities": PREDICTIVE}, gaussian)
    with pytest.raises(ValueError, match="one shape"):
        total_variation(PREDICTIVE, REFERENCE[:2])
    with pytest.raises(ValueError, match="non-negative"):
        gaussian_wasserstein_2([0.0], [-1.0], [0.0], [1.0])
