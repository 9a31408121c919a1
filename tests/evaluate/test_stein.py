"""Kernelised Stein discrepancy: the kernel against autograd, and its behaviour on N(0, I)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import grad, jacrev

from bayesflow.evaluate import (
    kernelized_stein_discrepancy,
    median_bandwidth,
    stein_kernel_matrix,
    stein_scores,
)


def base_kernel(kernel: str, bandwidth: float, offset: float = 1.0, exponent: float = -0.5):
    """The base kernel k(x, y) written directly, for autograd."""

    def imq(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (offset**2 + ((x - y) ** 2).sum() / bandwidth**2) ** exponent

    def rbf(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((x - y) ** 2).sum() / (2 * bandwidth**2))

    return imq if kernel == "imq" else rbf


def autograd_stein_kernel(k, x, y, score_x, score_y) -> float:
    """k_p = s(x)·s(y) k + s(x)·∇_y k + s(y)·∇_x k + tr ∇_x∇_y k, every derivative by autograd."""
    mixed = jacrev(jacrev(k, argnums=0), argnums=1)(x, y)
    value = (
        score_x @ score_y * k(x, y)
        + score_x @ grad(k, argnums=1)(x, y)
        + score_y @ grad(k, argnums=0)(x, y)
        + torch.trace(mixed)
    )
    return float(value)


@pytest.mark.parametrize("kernel", ["imq", "rbf"])
@pytest.mark.parametrize("dimension", [1, 3])
def test_stein_kernel_matches_autograd(kernel: str, dimension: int) -> None:
    """Every entry of the closed-form Stein kernel matrix equals autograd of its definition."""
    generator = torch.Generator().manual_seed(dimension)
    points = torch.randn(4, dimension, generator=generator, dtype=torch.float64)
    scores = torch.randn(4, dimension, generator=generator, dtype=torch.float64)
    matrix = stein_kernel_matrix(points, scores, kernel=kernel, bandwidth=1.3)
    k = base_kernel(kernel, 1.3)
    expected = [
        [autograd_stein_kernel(k, points[i], points[j], scores[i], scores[j]) for j in range(4)]
        for i in range(4)
    ]
    assert matrix == pytest.approx(np.array(expected), rel=1e-10, abs=1e-12)


def test_stein_kernel_matches_autograd_for_other_imq_parameters() -> None:
    """The IMQ terms in c and β hold for c = 2, β = −0.3, not only the defaults."""
    generator = torch.Generator().manual_seed(7)
    points = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    scores = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    matrix = stein_kernel_matrix(points, scores, bandwidth=0.7, offset=2.0, exponent=-0.3)
    k = base_kernel("imq", 0.7, offset=2.0, exponent=-0.3)
    assert matrix[0, 2] == pytest.approx(
        autograd_stein_kernel(k, points[0], points[2], scores[0], scores[2]), rel=1e-10
    )


def gaussian_ksd(samples: np.ndarray, **options) -> float:
    """KSD of samples against N(0, I), whose score is −x."""
    return kernelized_stein_discrepancy(samples, -samples, **options)


def test_ksd_of_exact_samples_shrinks_with_more_samples() -> None:
    """Exact N(0, I) samples in 2-D: KSD at n = 1000 is well under half of KSD at n = 100."""
    generator = np.random.default_rng(0)
    small = gaussian_ksd(generator.standard_normal((100, 2)))
    large = gaussian_ksd(generator.standard_normal((1000, 2)))
    assert large < 0.5 * small
    assert large < 0.1


@pytest.mark.parametrize("kernel, bandwidth", [("imq", 1.0), ("rbf", "median")])
def test_ksd_is_larger_for_shifted_or_scaled_samples(kernel: str, bandwidth) -> None:
    """Samples shifted by 1 or scaled by 2 are at least 5 times further than exact ones."""
    samples = np.random.default_rng(1).standard_normal((1000, 2))
    exact = gaussian_ksd(samples, kernel=kernel, bandwidth=bandwidth)
    assert gaussian_ksd(samples + 1.0, kernel=kernel, bandwidth=bandwidth) > 5 * exact
    assert gaussian_ksd(2.0 * samples, kernel=kernel, bandwidth=bandwidth) > 5 * exact


def test_ksd_is_the_root_mean_of_the_kernel_matrix_across_row_blocks() -> None:
    """600 samples span two row blocks; the blocked sum equals the full matrix's mean."""
    samples = np.random.default_rng(2).standard_normal((600, 3))
    matrix = stein_kernel_matrix(samples, -samples)
    assert gaussian_ksd(samples) == pytest.approx(np.sqrt(matrix.mean()), rel=1e-10)


def test_median_bandwidth_of_two_points_is_their_distance() -> None:
    """Two points 5 apart have one pairwise distance, 5."""
    assert median_bandwidth(np.array([[0.0, 0.0], [3.0, 4.0]])) == pytest.approx(5.0)


def test_ksd_rejects_an_unknown_kernel() -> None:
    """A kernel other than imq or rbf is refused by name."""
    with pytest.raises(ValueError, match="kernel must be one of .*'laplace'"):
        gaussian_ksd(np.zeros((3, 1)), kernel="laplace")


def test_stein_scores_of_a_gaussian_log_density() -> None:
    """The score of log N(0, I) at x is −x, computed by vmap(grad)."""
    samples = torch.randn(5, 3, generator=torch.Generator().manual_seed(3))
    scores = stein_scores(lambda x: -0.5 * (x**2).sum(), samples)
    assert torch.allclose(scores, -samples)
