"""Distance of a posterior's mean and variances to a reference posterior.

The reference is a closed form (a conjugate model) or a long NUTS run, given by its
per-parameter mean and variance. Two numbers, both unit-free and 0 for a perfect match::

    reference_mean_error     = √( (1/d) Σᵢ ((μᵢ − μ_ref,ᵢ) / σ_ref,ᵢ)² )
    reference_variance_error = (1/d) Σᵢ |log(varᵢ / var_ref,ᵢ)|

The mean error is the RMS of the mean's error in reference standard deviations, so a
parameter with a wide posterior may be off by more; the variance error is symmetric in
over- and under-estimation (a factor 2 either way gives log 2 ≈ 0.69).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayesflow.engines.base import Posterior

__all__ = ["compare_to_reference", "posterior_moments", "reference_distance"]


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)


def posterior_moments(posterior: Posterior) -> tuple[np.ndarray, np.ndarray]:
    """Per-parameter mean and variance (d,) of any posterior form.

    Sample sets give the sample mean and the unbiased (ddof = 1) sample variance;
    Gaussians give ``mean`` and ``var`` or the diagonal of ``cov``; a point estimate
    gives its variance of zeros.
    """
    if posterior.samples is not None:
        samples = posterior.samples.detach().cpu().double().numpy()
        if samples.shape[0] == 1:
            return samples[0], np.zeros(samples.shape[1])
        return samples.mean(axis=0), samples.var(axis=0, ddof=1)
    assert posterior.mean is not None, "a Gaussian posterior needs a mean"
    spread = posterior.var if posterior.var is not None else posterior.cov
    assert spread is not None, "a Gaussian posterior needs var or cov"
    variance = _as_numpy(spread.diagonal() if spread.ndim == 2 else spread)
    return _as_numpy(posterior.mean), variance


def reference_distance(
    mean: Any,
    reference_mean: Any,
    reference_var: Any,
    var: Any | None = None,
) -> dict[str, float]:
    """``reference_mean_error`` and, given ``var``, ``reference_variance_error``.

    Args:
        mean: (d,) the posterior's mean.
        reference_mean: (d,) the reference mean.
        reference_var: (d,) the reference variances, all positive.
        var: (d,) the posterior's variances, all positive; ``None`` skips the variance
            error (a point estimate has none).

    Returns:
        The errors defined in the module docstring.
    """
    center, target_center, target_var = map(_as_numpy, (mean, reference_mean, reference_var))
    if not center.shape == target_center.shape == target_var.shape:
        raise ValueError(
            f"expected mean, reference_mean and reference_var of one shape (d,), got "
            f"{center.shape}, {target_center.shape} and {target_var.shape}"
        )
    if not (target_var > 0).all():
        raise ValueError("reference_var must be positive everywhere")
    standardised = (center - target_center) / np.sqrt(target_var)
    result = {"reference_mean_error": float(np.sqrt((standardised**2).mean()))}
    if var is not None:
        spread = _as_numpy(var)
        if spread.shape != target_var.shape or not (spread > 0).all():
            raise ValueError(
                f"var must be positive with shape {target_var.shape}; pass var=None for a "
                "point estimate"
            )
        result["reference_variance_error"] = float(np.abs(np.log(spread / target_var)).mean())
    return result


def compare_to_reference(
    posterior: Posterior, reference_mean: Any, reference_var: Any
) -> dict[str, float]:
    """:func:`reference_distance` of a posterior of any form; a point estimate (all
    variances zero) gets only the mean error."""
    mean, var = posterior_moments(posterior)
    spread = var if (var > 0).any() else None
    return reference_distance(mean, reference_mean, reference_var, spread)
