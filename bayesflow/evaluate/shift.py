"""Named distribution-shift sets under a classifier's posterior predictive (torch-free).

A shift set is labelled data of the test set's shape from elsewhere (``multiple_choice``'s
``data.shift``: questions of other subjects). Under the same draw of posterior members as
the test set, each set named ``<name>`` gets, from the predictive p̄ = (1/S) Σₛ p(y|x,θₛ):

- ``shift_accuracy_<name>``, ``shift_nll_<name>``, ``shift_ece_<name>``,
  ``shift_brier_<name>``: the test set's metrics (:func:`~bayesflow.evaluate.metrics.
  classification_metrics`, the same ECE bins) on the set's points;
- ``shift_auroc_total_<name>`` and ``shift_auroc_epistemic_<name>``: the AUROC of TU
  (entropy of p̄) and of EU (mutual information, TU minus the mean member entropy) telling
  the set's points (label 1) from the test points (label 0)
  (:func:`~bayesflow.evaluate.uncertainty.ood_auroc`). One member has EU = 0 everywhere,
  so its EU AUROC is exactly 0.5.

The per-point arrays are the test set's under a ``shift_<name>_`` prefix:
``probabilities`` (n, C), ``labels``, ``uncertainty_total``, ``_aleatoric``, ``_epistemic``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayesflow.evaluate.metrics import classification_metrics
from bayesflow.evaluate.uncertainty import decompose_uncertainty, ood_auroc

__all__ = ["SHIFT_CONVENTIONS", "SHIFT_PREFIX", "shift_evaluation", "shift_metric"]

SHIFT_PREFIX = "shift_"
# What each shift metric means, by its name without the set's suffix.
SHIFT_CONVENTIONS: dict[str, str] = {
    "shift_accuracy": "as test_accuracy, on the shift set's points",
    "shift_nll": "as test_nll, on the shift set's points",
    "shift_ece": "as test_ece (the same bins), on the shift set's points",
    "shift_brier": "as test_brier, on the shift set's points",
    "shift_auroc_total": "AUROC of TU as a score, test points label 0, the shift set's label 1; "
    "Mann-Whitney with average ranks for ties (0.5 = chance)",
    "shift_auroc_epistemic": "as shift_auroc_total with EU (the mutual information) as the score; "
    "one posterior member has EU = 0 everywhere: exactly 0.5",
}


def shift_metric(metric: str, name: str) -> str:
    """The logged name of ``metric`` (``accuracy``, ``auroc_total``, ...) on the set ``name``."""
    return f"{SHIFT_PREFIX}{metric}_{name}"


def shift_evaluation(
    test_sample_probs: Any, sample_probs: Any, labels: Any, name: str, ece_bins: int = 10,
    ece_binning: str = "equal_width",
) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, str]]:
    """The metrics, per-point arrays and convention lines of one shift set.

    Args:
        test_sample_probs: (S, n, C) the members' probabilities on the test points.
        sample_probs: (S, m, C) the same members' probabilities on the set's points.
        labels: (m,) the set's labels.
        name: the set's name, the metrics' suffix.
        ece_bins, ece_binning: the ECE's bins (the test set's).
    """
    test = decompose_uncertainty(test_sample_probs)
    shifted = decompose_uncertainty(sample_probs)
    probabilities = np.asarray(sample_probs, dtype=np.float64).mean(axis=0)
    targets = np.asarray(labels)
    scores = classification_metrics(probabilities, targets, ece_bins, ece_binning)
    metrics = {shift_metric(key.removeprefix("test_"), name): value for key, value in scores.items()}
    metrics[shift_metric("auroc_total", name)] = ood_auroc(test.total, shifted.total)
    metrics[shift_metric("auroc_epistemic", name)] = ood_auroc(test.epistemic, shifted.epistemic)
    prefix = f"{SHIFT_PREFIX}{name}_"
    arrays = {
        f"{prefix}probabilities": probabilities, f"{prefix}labels": targets,
        f"{prefix}uncertainty_total": shifted.total, f"{prefix}uncertainty_aleatoric": shifted.aleatoric,
        f"{prefix}uncertainty_epistemic": shifted.epistemic,
    }
    bins = f"; {ece_bins} {ece_binning.replace('_', '-')} bins"
    conventions = {
        shift_metric(key.removeprefix(SHIFT_PREFIX), name): line + (bins if key == "shift_ece" else "")
        for key, line in SHIFT_CONVENTIONS.items()
    }
    return metrics, arrays, conventions
