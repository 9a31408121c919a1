"""Distance of a posterior's mean and variances to a reference posterior."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.evaluate import compare_to_reference, posterior_moments, reference_distance


def test_identical_moments_have_zero_distance() -> None:
    """A posterior equal to the reference has both errors 0."""
    mean, var = np.array([1.0, -2.0]), np.array([0.5, 2.0])
    assert reference_distance(mean, mean, var, var) == pytest.approx(
        {"reference_mean_error": 0.0, "reference_variance_error": 0.0}
    )


def test_reference_distance_hand_computed() -> None:
    """Means off by 1 sd and 3 sd: √((1 + 9)/2) = √5; variances ×2 and ÷2: mean |log| = log 2."""
    distance = reference_distance(
        mean=np.array([2.0, 6.0]),
        reference_mean=np.array([0.0, 0.0]),
        reference_var=np.array([4.0, 4.0]),
        var=np.array([8.0, 2.0]),
    )
    assert distance["reference_mean_error"] == pytest.approx(math.sqrt(5))
    assert distance["reference_variance_error"] == pytest.approx(math.log(2))


def test_reference_distance_refuses_zero_variance() -> None:
    """A zero variance has no log ratio; the message says to pass var=None."""
    with pytest.raises(ValueError, match="pass var=None for a point estimate"):
        reference_distance(np.zeros(2), np.zeros(2), np.ones(2), var=np.zeros(2))


def test_posterior_moments_of_samples_use_the_unbiased_variance() -> None:
    """Samples 1, 3 of one parameter: mean 2, variance 2 (ddof = 1)."""
    mean, var = posterior_moments(Posterior(samples=torch.tensor([[1.0], [3.0]])))
    assert (mean[0], var[0]) == pytest.approx((2.0, 2.0))


def test_posterior_moments_of_a_dense_gaussian_use_the_diagonal() -> None:
    """A full covariance contributes its diagonal."""
    cov = torch.tensor([[2.0, 0.5], [0.5, 3.0]])
    _, var = posterior_moments(Posterior(mean=torch.zeros(2), cov=cov))
    assert var == pytest.approx([2.0, 3.0])


def test_compare_to_reference_skips_the_variance_of_a_point_estimate() -> None:
    """A MAP posterior (variance zero) gets the mean error only."""
    point = Posterior(mean=torch.tensor([1.0, 1.0]), var=torch.zeros(2))
    distance = compare_to_reference(point, np.zeros(2), np.ones(2))
    assert distance == pytest.approx({"reference_mean_error": 1.0})
