"""Uncertainty decomposition on agreeing and disagreeing ensembles; AUROC on known orderings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from bayesflow.evaluate import auroc, decompose_uncertainty, entropy, ood_auroc
from bayesflow.evaluate.ranks import average_ranks


def test_entropy_treats_zero_probability_as_zero() -> None:
    """H(1, 0) = 0 and H(½, ½) = log 2, with no nan from 0 · log 0."""
    assert entropy(np.array([[1.0, 0.0], [0.5, 0.5]])) == pytest.approx([0.0, math.log(2)])


def test_agreeing_ensemble_has_no_epistemic_uncertainty() -> None:
    """Members that predict the same probabilities give EU = 0 and TU = AU."""
    member = np.array([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]])
    result = decompose_uncertainty(np.stack([member] * 4))
    assert result.epistemic == pytest.approx([0.0, 0.0], abs=1e-12)
    assert result.total == pytest.approx(entropy(member))
    assert result.aleatoric == pytest.approx(entropy(member))


def test_confident_disagreement_is_all_epistemic() -> None:
    """Members certain of opposite classes: TU = log 2, AU = 0, EU = log 2."""
    result = decompose_uncertainty(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]))
    assert (result.total[0], result.aleatoric[0], result.epistemic[0]) == pytest.approx(
        (math.log(2), 0.0, math.log(2))
    )


def test_partial_disagreement_hand_computed() -> None:
    """Members (.9, .1) and (.1, .9): TU = log 2, AU = H(.9, .1), EU = log 2 − H(.9, .1) ≈ .368."""
    result = decompose_uncertainty(np.array([[[0.9, 0.1]], [[0.1, 0.9]]]))
    binary = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert result.aleatoric[0] == pytest.approx(binary)
    assert result.epistemic[0] == pytest.approx(math.log(2) - binary)
    assert result.epistemic[0] == pytest.approx(0.368, abs=1e-3)


def test_decomposition_rejects_averaged_probabilities() -> None:
    """Passing (n, C) averaged probabilities instead of (S, n, C) is refused."""
    with pytest.raises(ValueError, match=r"shape \(S, n, C\)"):
        decompose_uncertainty(np.full((3, 2), 0.5))


def test_auroc_of_perfect_and_reversed_orderings() -> None:
    """Positives all above negatives give 1; all below give 0."""
    labels = np.array([0, 0, 0, 1, 1])
    assert auroc(np.array([0.1, 0.2, 0.3, 0.8, 0.9]), labels) == 1.0
    assert auroc(np.array([0.8, 0.9, 0.7, 0.1, 0.2]), labels) == 0.0


def test_auroc_hand_computed_with_a_tie() -> None:
    """Negatives 1, 2, 3 against positives 3, 4: pairs won 3 + 3 − ½ (the tie at 3) = 5.5 of 6."""
    value = auroc(np.array([1.0, 2.0, 3.0, 3.0, 4.0]), np.array([0, 0, 0, 1, 1]))
    assert value == pytest.approx(5.5 / 6)


def test_auroc_matches_sklearn_on_tied_scores() -> None:
    """On random scores with many ties the rank statistic equals sklearn's trapezoid AUROC."""
    generator = np.random.default_rng(0)
    scores = generator.integers(0, 5, size=200).astype(float)
    labels = generator.integers(0, 2, size=200)
    assert auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))


def test_auroc_needs_both_labels() -> None:
    """All-in-distribution labels have no AUROC; the message counts each label."""
    with pytest.raises(ValueError, match="3 with label 0 and 0 with label 1"):
        auroc(np.array([1.0, 2.0, 3.0]), np.array([0, 0, 0]))


def test_ood_auroc_labels_ood_as_positive() -> None:
    """OOD points with higher uncertainty than every in-distribution point give 1."""
    assert ood_auroc(np.array([0.1, 0.2]), np.array([0.5, 0.6, 0.7])) == 1.0


def test_average_ranks_match_scipy() -> None:
    """Ranks with ties equal scipy.stats.rankdata's average method, shape kept."""
    values = np.random.default_rng(1).integers(0, 6, size=(4, 25))
    assert average_ranks(values) == pytest.approx(rankdata(values, axis=None).reshape(4, 25))
