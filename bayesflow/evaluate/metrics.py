"""Predictive metrics as pure functions of predictive probabilities (or means) and labels.

Every function accepts numpy arrays or torch tensors, computes in float64 numpy and
returns a Python ``float``. Each docstring states its convention; :data:`CONVENTIONS`
repeats them in one line each so a run can log exactly what its numbers mean.

The predictive of a classification posterior is the average of the *probabilities*
over parameter samples, p̄(y|x) = (1/S) Σₛ p(y|x, θₛ), never the softmax of averaged
logits (the Bayesian model average; Wenzel et al. 2020, posteriors' IMDB example).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CONVENTIONS",
    "PROBABILITY_FLOOR",
    "accuracy",
    "brier",
    "ece",
    "gaussian_nll",
    "nll",
    "rmse",
]

# Probabilities are clipped below at this value before taking logs, so one confidently
# wrong prediction gives a large but finite NLL (−log 1e-12 ≈ 27.6).
PROBABILITY_FLOOR = 1e-12

CONVENTIONS: dict[str, str] = {
    "predictive": "mean over posterior samples of predicted probabilities (not of logits)",
    "test_nll": "mean over test points of -log pbar(y|x), pbar clipped at 1e-12; "
    "regression: -log of the mean over samples of N(y; mu_s, noise_sd^2)",
    "test_accuracy": "fraction of test points whose argmax predictive class equals the label",
    "test_ece": "equal-width bins over max predictive probability (default 10), "
    "sum_b |B_b|/n * |acc_b - conf_b|",
    "test_brier": "mean over test points of sum over classes (p_c - 1[y=c])^2, "
    "not divided by the number of classes (range 0..2)",
    "test_rmse": "root mean squared error of the predictive mean (mean over samples of mu_s)",
}


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


def ece(probs: Any, labels: Any, bins: int = 10) -> float:
    """Expected calibration error over equal-width confidence bins.

    Convention: confidence is the max predictive probability; [0, 1] is cut into
    ``bins`` equal-width bins (left-open, right-closed, the first also holds 0), and
    ECE = Σ_b (|B_b| / n) · |acc_b − conf_b| over non-empty bins (Guo et al. 2017).

    Args:
        probs: (n, C) predictive probabilities.
        labels: (n,) integer class labels.
        bins: number of equal-width bins.

    Returns:
        ECE in [0, 1].
    """
    probabilities, targets = _probabilities_and_labels(probs, labels)
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == targets).astype(np.float64)
    # Bin b holds confidences in (edge_b, edge_b+1]; comparing against linspace edges
    # (as Guo et al.'s code does) rather than ceil(confidence * bins) keeps 0.3 in bin 2,
    # where 0.3 * 10 = 3.0000000000000004 would push it to bin 3.
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.digitize(confidence, edges, right=True) - 1, 0, bins - 1)
    total = 0.0
    for member in range(bins):
        mask = index == member
        if mask.any():
            gap = abs(correct[mask].mean() - confidence[mask].mean())
            total += mask.sum() / targets.shape[0] * gap
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
