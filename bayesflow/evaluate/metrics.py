"""Predictive metrics as pure functions of predictive probabilities (or means) and labels.

Every function accepts numpy arrays or torch tensors and computes in float64 numpy; a
metric returns a Python ``float``, and ``classification_metrics``, ``single_sample_metrics``
and ``regression_metrics`` return the named metrics a run logs. Each docstring states its
convention; :data:`CONVENTIONS` repeats them in one line each so a run can log exactly
what its numbers mean (docs/metrics.md has the formulas). scipy comes with scikit-learn.

The predictive of a classification posterior is the average of the *probabilities*
over parameter samples, p̄(y|x) = (1/S) Σₛ p(y|x, θₛ), never the softmax of averaged
logits (the Bayesian model average; Wenzel et al. 2020, posteriors' IMDB example).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import ndtr

from bayesflow.evaluate.conventions import BINNINGS, CONVENTIONS

__all__ = [
    "CONVENTIONS",
    "DEFAULT_COVERAGE_LEVELS",
    "PROBABILITY_FLOOR",
    "accuracy",
    "brier",
    "calibration_error",
    "classification_metrics",
    "coverage_name",
    "ece",
    "gaussian_nll",
    "interval_coverage",
    "nll",
    "predictive_cdf",
    "regression_metrics",
    "rmse",
    "single_sample_metrics",
]

# Probabilities are clipped below at this value before taking logs, so one confidently
# wrong prediction gives a large but finite NLL (−log 1e-12 ≈ 27.6).
PROBABILITY_FLOOR = 1e-12

# Central predictive intervals whose coverage a regression run reports.
DEFAULT_COVERAGE_LEVELS: tuple[float, ...] = (0.5, 0.9, 0.95)

def _as_numpy(values: Any) -> np.ndarray:
    """A float64/int numpy view of a numpy array, torch tensor or sequence."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def _probabilities_and_labels(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    probabilities = _as_numpy(probs).astype(np.float64)
    targets = _as_numpy(labels).astype(np.int64).reshape(-1)
    if probabilities.ndim != 2 or probabilities.shape[0] != targets.shape[0]:
        raise ValueError(
            f"expected probs of shape (n, C) and labels of shape (n,), got "
            f"{probabilities.shape} and {targets.shape}"
        )
    return probabilities, targets


def nll(probs: Any, labels: Any) -> float:
    """Negative log predictive likelihood of a classifier.

    Convention: the mean over test points of −log p̄(yᵢ|xᵢ), where p̄ is the
    posterior-averaged predictive probability and is clipped below at 1e-12.

    Args:
        probs: (n, C) predictive probabilities (already averaged over samples).
        labels: (n,) integer class labels.

    Returns:
        The mean negative log likelihood in nats.
    """
    probabilities, targets = _probabilities_and_labels(probs, labels)
    chosen = probabilities[np.arange(targets.shape[0]), targets]
    return float(-np.log(np.clip(chosen, PROBABILITY_FLOOR, None)).mean())


def accuracy(probs: Any, labels: Any) -> float:
    """Fraction of points whose most probable class equals the label.

    Args:
        probs: (n, C) predictive probabilities.
        labels: (n,) integer class labels.

    Returns:
        Accuracy in [0, 1]; ties go to the lowest class index (``argmax``).
    """
    probabilities, targets = _probabilities_and_labels(probs, labels)
    return float((probabilities.argmax(axis=1) == targets).mean())


def _bin_index(confidence: np.ndarray, bins: int, binning: str) -> np.ndarray:
    """The bin (0 … bins−1) of each confidence; bins are right-closed intervals."""
    if bins < 1:
        raise ValueError(f"ece bins must be a positive number, got {bins}")
    if binning == "equal_width":
        # Right-closed as in Guo et al.'s definition, I_m = ((m − 1)/M, m/M].
        # Comparing against linspace edges (as Guo et al.'s code does) rather than
        # ceil(confidence * bins) keeps 0.3 in bin 2, where 0.3 * 10 = 3.0000000000000004
        # would push it to bin 3.
        edges = np.linspace(0.0, 1.0, bins + 1)
    elif binning == "equal_mass":
        # Edges at the empirical quantiles (numpy's linear interpolation): with distinct
        # confidences and n divisible by ``bins`` every bin holds n / bins points, and
        # tied confidences always share a bin, so the result does not depend on order.
        edges = np.quantile(confidence, np.linspace(0.0, 1.0, bins + 1))
    else:
        raise ValueError(f"ece binning must be one of {list(BINNINGS)}, got {binning!r}")
    return np.digitize(confidence, edges[1:-1], right=True)


def ece(probs: Any, labels: Any, bins: int = 10, binning: str = "equal_width") -> float:
    """Expected calibration error over confidence bins.

    Convention: confidence is the max predictive probability; the bins are right-closed
    intervals (the first also holds its left edge), and
    ECE = Σ_b (|B_b| / n) · |acc_b − conf_b| over non-empty bins (Guo et al. 2017).
    ``equal_width`` cuts [0, 1] into ``bins`` equal intervals; ``equal_mass`` cuts at the
    empirical quantiles of the confidences, so each bin holds about n / bins points
    (Nixon et al. 2019, "adaptive" binning).

    Tested equal to torchmetrics' ``MulticlassCalibrationError(norm="l1")`` (equal width)
    and to netcal's ``ECE`` (both schemes, three or more classes). Both libraries close
    their bins on the left, so they differ only for a confidence exactly on an edge: it
    falls in the bin above there, and torchmetrics gives a confidence of exactly 1 a bin
    of its own (tests/evaluate/test_reference_libraries.py pins both values).

    Args:
        probs: (n, C) predictive probabilities.
        labels: (n,) integer class labels.
        bins: number of bins.
        binning: ``"equal_width"`` (default) or ``"equal_mass"``.

    Returns:
        ECE in [0, 1].
    """
    probabilities, targets = _probabilities_and_labels(probs, labels)
    correct = probabilities.argmax(axis=1) == targets
    return calibration_error(probabilities.max(axis=1), correct, bins, binning)


def calibration_error(confidence: Any, correct: Any, bins: int = 10, binning: str = "equal_width") -> float:
    """:func:`ece` from each point's confidence (its max predictive probability) and
    whether its argmax was right, (n,) each: the form a predictive too wide to hold
    whole (a language model's vocabulary) reduces to."""
    confidence = _as_numpy(confidence).astype(np.float64).reshape(-1)
    hits = _as_numpy(correct).astype(np.float64).reshape(-1)
    index = _bin_index(confidence, bins, binning)
    total = 0.0
    for member in range(bins):
        mask = index == member
        if mask.any():
            gap = abs(hits[mask].mean() - confidence[mask].mean())
            total += mask.sum() / confidence.shape[0] * gap
    return float(total)


def brier(probs: Any, labels: Any) -> float:
    """Multi-class Brier score.

    Convention: the mean over points of Σ_c (p_c − 1[y = c])², summed over classes and
    *not* divided by the number of classes, so it lies in [0, 2].

    Args:
        probs: (n, C) predictive probabilities.
        labels: (n,) integer class labels.

    Returns:
        The Brier score.
    """
    probabilities, targets = _probabilities_and_labels(probs, labels)
    one_hot = np.zeros_like(probabilities)
    one_hot[np.arange(targets.shape[0]), targets] = 1.0
    return float(((probabilities - one_hot) ** 2).sum(axis=1).mean())


def rmse(means: Any, targets: Any) -> float:
    """Root mean squared error of a regression predictive.

    Convention: ``means`` (n,) is the predictive mean; pass (S, n) per-sample means and
    they are averaged over samples first (the mean of the predictive mixture).

    Args:
        means: (n,) or (S, n) predicted means.
        targets: (n,) observed values.

    Returns:
        √(mean over points of (ȳᵢ − yᵢ)²).
    """
    predicted = _as_numpy(means).astype(np.float64)
    if predicted.ndim == 2:
        predicted = predicted.mean(axis=0)
    observed = _as_numpy(targets).astype(np.float64).reshape(-1)
    return float(np.sqrt(((predicted - observed) ** 2).mean()))


def gaussian_nll(means: Any, targets: Any, noise_sd: float) -> float:
    """Negative log likelihood of the Gaussian predictive mixture.

    Convention: the mean over points of −log[(1/S) Σₛ N(yᵢ; μₛᵢ, σ²)], with a fixed
    observation noise σ = ``noise_sd``; computed with log-sum-exp for stability.

    Args:
        means: (S, n) per-sample predicted means (or (n,) for one sample).
        targets: (n,) observed values.
        noise_sd: the likelihood's observation noise standard deviation σ.

    Returns:
        The mean negative log predictive density in nats.
    """
    predicted = _as_numpy(means).astype(np.float64)
    if predicted.ndim == 1:
        predicted = predicted[None, :]
    observed = _as_numpy(targets).astype(np.float64).reshape(1, -1)
    log_density = (
        -0.5 * ((observed - predicted) / noise_sd) ** 2 - np.log(noise_sd) - 0.5 * np.log(2 * np.pi)
    )
    peak = log_density.max(axis=0)
    log_mixture = peak + np.log(np.exp(log_density - peak).mean(axis=0))
    return float(-log_mixture.mean())


def predictive_cdf(means: Any, targets: Any, noise_sd: float) -> np.ndarray:
    """The Gaussian mixture predictive's CDF at each target (the PIT values).

    F(yᵢ) = (1/S) Σₛ Φ((yᵢ − μₛᵢ) / σ), exact for the mixture (no sampling).

    Args:
        means: (S, n) per-sample predicted means (or (n,) for one sample).
        targets: (n,) observed values.
        noise_sd: the likelihood's observation noise σ.

    Returns:
        (n,) values in [0, 1].
    """
    predicted = _as_numpy(means).astype(np.float64)
    if predicted.ndim == 1:
        predicted = predicted[None, :]
    observed = _as_numpy(targets).astype(np.float64).reshape(1, -1)
    return np.asarray(ndtr((observed - predicted) / noise_sd).mean(axis=0))


def interval_coverage(
    means: Any,
    targets: Any,
    noise_sd: float,
    levels: Sequence[float] = DEFAULT_COVERAGE_LEVELS,
) -> np.ndarray:
    """Coverage of the central predictive intervals of a Gaussian mixture predictive.

    Convention: yᵢ lies in the central interval of level α exactly when its PIT value
    F(yᵢ) (see :func:`predictive_cdf`) lies in [(1 − α)/2, (1 + α)/2]; this uses the
    mixture itself, neither sampling nor a moment-matched Gaussian.

    Args:
        means: (S, n) per-sample predicted means.
        targets: (n,) observed values.
        noise_sd: the likelihood's observation noise σ.
        levels: interval levels α in (0, 1).

    Returns:
        (len(levels),) fractions of test points inside each interval.
    """
    if any(not 0.0 < level < 1.0 for level in levels):
        raise ValueError(f"coverage levels must lie in (0, 1), got {list(levels)}")
    distance = np.abs(predictive_cdf(means, targets, noise_sd) - 0.5)
    return np.array([(distance <= level / 2).mean() for level in levels])


def coverage_name(level: float) -> str:
    """``test_coverage_90`` for level 0.9 (``:g`` drops float noise such as 90.00000000000001)."""
    return f"test_coverage_{level * 100:g}"


def classification_metrics(
    probs: Any, labels: Any, bins: int = 10, binning: str = "equal_width"
) -> dict[str, float]:
    """``test_nll``, ``test_accuracy``, ``test_ece`` and ``test_brier`` of a predictive.

    Args:
        probs: (n, C) predictive probabilities (averaged over samples).
        labels: (n,) integer class labels.
        bins, binning: the ECE's bins (see :func:`ece`).
    """
    return {
        "test_nll": nll(probs, labels),
        "test_accuracy": accuracy(probs, labels),
        "test_ece": ece(probs, labels, bins=bins, binning=binning),
        "test_brier": brier(probs, labels),
    }


def single_sample_metrics(
    sample_probs: Any, labels: Any, bins: int = 10, binning: str = "equal_width"
) -> dict[str, float]:
    """Each classification metric of one posterior sample, averaged over the samples.

    Convention: ``test_<metric>_single`` = (1/S) Σₛ metric(p(y|x, θₛ)), the "single
    sample" numbers Wenzel et al. (2020) report beside the "ensemble" ones; a point
    estimate (S = 1) gives the ensemble numbers.

    Args:
        sample_probs: (S, n, C) probabilities of each parameter sample.
        labels: (n,) integer class labels.
        bins, binning: the ECE's bins (see :func:`ece`).
    """
    per_sample = _as_numpy(sample_probs).astype(np.float64)
    if per_sample.ndim != 3:
        raise ValueError(f"expected sample_probs of shape (S, n, C), got {per_sample.shape}")
    each = [classification_metrics(probs, labels, bins, binning) for probs in per_sample]
    return {f"{name}_single": float(np.mean([m[name] for m in each])) for name in each[0]}


def regression_metrics(
    means: Any,
    targets: Any,
    noise_sd: float,
    levels: Sequence[float] = DEFAULT_COVERAGE_LEVELS,
) -> dict[str, float]:
    """``test_nll``, ``test_rmse``, their ``_single`` versions and interval coverages.

    Args:
        means: (S, n) per-sample predicted means.
        targets: (n,) observed values.
        noise_sd: the likelihood's observation noise σ.
        levels: levels of the central intervals (``test_coverage_50`` for 0.5, …).
    """
    predicted = _as_numpy(means).astype(np.float64)
    if predicted.ndim == 1:
        predicted = predicted[None, :]
    result = {
        "test_nll": gaussian_nll(predicted, targets, noise_sd),
        "test_rmse": rmse(predicted, targets),
        "test_nll_single": float(
            np.mean([gaussian_nll(sample, targets, noise_sd) for sample in predicted])
        ),
        "test_rmse_single": float(np.mean([rmse(sample, targets) for sample in predicted])),
    }
    coverage = interval_coverage(predicted, targets, noise_sd, levels)
    result.update({coverage_name(level): float(value) for level, value in zip(levels, coverage)})
    return result
