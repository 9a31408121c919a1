"""Shift sets under a classifier's posterior predictive (:mod:`bayesflow.evaluate.shift`):
the metrics against a direct computation, the AUROCs against scikit-learn, one member's
EU of zero."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from bayesflow.evaluate.shift import shift_evaluation


def member_probabilities(members: int, points: int, seed: int, sharpness: float = 1.0) -> np.ndarray:
    """(S, n, 4) softmax probabilities of random logits."""
    logits = sharpness * np.random.default_rng(seed).normal(size=(members, points, 4))
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def entropy(probabilities: np.ndarray) -> np.ndarray:
    return -(probabilities * np.log(probabilities)).sum(-1)


def test_shift_metrics_equal_a_direct_computation() -> None:
    """Accuracy, NLL, Brier and 10-bin equal-width ECE of the members' mean probability, by hand."""
    test, shifted = member_probabilities(5, 30, 0), member_probabilities(5, 40, 1)
    labels = np.random.default_rng(2).integers(0, 4, 40)
    metrics, arrays, conventions = shift_evaluation(test, shifted, labels, "far", ece_bins=10)
    mean = shifted.mean(0)
    rows = np.arange(40)
    confidence, correct = mean.max(-1), (mean.argmax(-1) == labels).astype(float)
    edges = np.linspace(0, 1, 11)
    ece = sum(abs(correct[inside].mean() - confidence[inside].mean()) * inside.mean()
              for low, high in pairwise(edges)
              if (inside := (confidence > low) & (confidence <= high)).any())
    assert metrics["shift_accuracy_far"] == pytest.approx(correct.mean())
    assert metrics["shift_nll_far"] == pytest.approx(-np.log(mean[rows, labels]).mean())
    assert metrics["shift_brier_far"] == pytest.approx(((mean - np.eye(4)[labels]) ** 2).sum(-1).mean())
    assert metrics["shift_ece_far"] == pytest.approx(ece)
    assert np.allclose(arrays["shift_far_probabilities"], mean) and (arrays["shift_far_labels"] == labels).all()
    assert set(conventions) == set(metrics) and "10 equal-width bins" in conventions["shift_ece_far"]


def test_aurocs_of_total_and_epistemic_uncertainty_agree_with_sklearn() -> None:
    """TU = entropy of the mean, EU = TU − mean member entropy; test points 0, shift points 1."""
    test, shifted = member_probabilities(4, 25, 3, sharpness=2.0), member_probabilities(4, 35, 4)
    metrics, arrays, _ = shift_evaluation(test, shifted, np.zeros(35, dtype=int), "far")
    labels = np.r_[np.zeros(25), np.ones(35)]
    for kind, score in (("total", entropy), ("epistemic", lambda p: entropy(p.mean(0)) - entropy(p).mean(0))):
        expected = roc_auc_score(labels, np.r_[score(test if kind == "epistemic" else test.mean(0)),
                                              score(shifted if kind == "epistemic" else shifted.mean(0))])
        assert metrics[f"shift_auroc_{kind}_far"] == pytest.approx(expected)
    assert np.allclose(arrays["shift_far_uncertainty_total"], entropy(shifted.mean(0)))


def test_a_point_estimate_has_no_epistemic_uncertainty_and_an_eu_auroc_of_one_half() -> None:
    """One member: EU = 0 on every point, so its AUROC is exactly 0.5; TU still separates."""
    test, shifted = member_probabilities(1, 20, 5, sharpness=3.0), member_probabilities(1, 20, 6, sharpness=0.1)
    metrics, arrays, _ = shift_evaluation(test, shifted, np.zeros(20, dtype=int), "far")
    assert (arrays["shift_far_uncertainty_epistemic"] == 0).all()
    assert metrics["shift_auroc_epistemic_far"] == 0.5
    assert metrics["shift_auroc_total_far"] > 0.9  # flat shifted predictions: high entropy
