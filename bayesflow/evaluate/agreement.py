"""How close a predictive distribution is to a reference predictive, point by point.

The scores of the NeurIPS 2021 competition on approximate inference in Bayesian deep
learning (Wilson et al., 2022, "Evaluating Approximate Inference in Bayesian Deep
Learning"), where the reference was a long HMC run. Over n points with predictive
class probabilities p(c|x) and reference probabilities p_ref(c|x)::

    agreement       = (1/n) Σₓ 1[argmax_c p(c|x) = argmax_c p_ref(c|x)]
    total_variation = (1/n) Σₓ ½ Σ_c |p(c|x) − p_ref(c|x)|

Agreement is 1 and total variation 0 for identical predictives; total variation lies in
[0, 1]. A tie in the argmax goes to the lowest class index (numpy's and torch's
``argmax``). For regression, the 2-Wasserstein distance between the two predictives,
each moment-matched to a Gaussian (the predictive of a Gaussian likelihood is a mixture
of Gaussians over posterior samples; its mean and variance are exact)::

    wasserstein_2 = (1/n) Σₓ √((μ(x) − μ_ref(x))² + (σ(x) − σ_ref(x))²)

the closed form of W2 between N(μ, σ²) and N(μ_ref, σ_ref²), averaged over points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["agreement", "compare_predictives", "gaussian_wasserstein_2", "total_variation"]


def _pair(values: Any, reference: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two (n, C) probability tables of one shape, as float64."""
    first, second = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if first.ndim != 2 or first.shape != second.shape or first.shape[0] == 0:
        raise ValueError(
            f"expected two (n, C) probability tables of one shape with n > 0, got "
            f"{first.shape} and {second.shape}"
        )
    return first, second


def agreement(probabilities: Any, reference: Any) -> float:
    """Fraction of points whose most probable class is the reference's.

    Args:
        probabilities: (n, C) the predictive's class probabilities.
        reference: (n, C) the reference's.
    """
    values, target = _pair(probabilities, reference)
    return float(np.mean(values.argmax(axis=1) == target.argmax(axis=1)))


def total_variation(probabilities: Any, reference: Any) -> float:
    """Mean over points of the total variation distance ½ Σ_c |p(c|x) − p_ref(c|x)|.

    Args:
        probabilities: (n, C) the predictive's class probabilities.
        reference: (n, C) the reference's.
    """
    values, target = _pair(probabilities, reference)
    return float(np.mean(0.5 * np.abs(values - target).sum(axis=1)))


def gaussian_wasserstein_2(mean: Any, variance: Any, reference_mean: Any, reference_variance: Any) -> float:
    """Mean over points of the 2-Wasserstein distance between N(mean, variance) and
    N(reference_mean, reference_variance), each argument (n,).

    Raises:
        ValueError: shapes differ, or a variance is negative.
    """
    arrays = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (mean, variance, reference_mean, reference_variance)]
    if len({a.shape for a in arrays}) != 1 or arrays[0].size == 0:
        raise ValueError(f"expected four arrays of one shape (n,), got {[a.shape for a in arrays]}")
    center, spread, target_center, target_spread = arrays
    if (spread < 0).any() or (target_spread < 0).any():
        raise ValueError("variances must be non-negative")
    squared = (center - target_center) ** 2 + (np.sqrt(spread) - np.sqrt(target_spread)) ** 2
    return float(np.mean(np.sqrt(squared)))


def compare_predictives(
    predictive: dict[str, np.ndarray], reference: dict[str, np.ndarray]
) -> dict[str, float]:
    """The scores of a predictive against a reference, by what both hold.

    Args:
        predictive, reference: ``{"probabilities": (n, C)}`` (classification: gives
            ``agreement`` and ``total_variation``) or ``{"mean": (n,), "variance": (n,)}``
            (a Gaussian predictive per point: gives ``wasserstein_2``).
    """
    if "probabilities" in predictive and "probabilities" in reference:
        return {
            "agreement": agreement(predictive["probabilities"], reference["probabilities"]),
            "total_variation": total_variation(predictive["probabilities"], reference["probabilities"]),
        }
    if {"mean", "variance"} <= set(predictive) and {"mean", "variance"} <= set(reference):
        return {"wasserstein_2": gaussian_wasserstein_2(
            predictive["mean"], predictive["variance"], reference["mean"], reference["variance"]
        )}
    raise ValueError(
        f"expected both to hold probabilities or both mean and variance, got "
        f"{sorted(predictive)} and {sorted(reference)}"
    )
