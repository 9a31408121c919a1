"""Uncertainty decomposition of a classification posterior, and out-of-distribution AUROC.

The decomposition of the posteriors paper (Duffield et al. 2025, eq. 2; Depeweg et al.
2018), per test point x, in nats::

    TU(x) = H[p̄(y|x)]                 total: entropy of the predictive p̄ = (1/S) Σₛ p(y|x,θₛ)
    AU(x) = (1/S) Σₛ H[p(y|x,θₛ)]      aleatoric: expected entropy of one sample
    EU(x) = TU(x) − AU(x)             epistemic: the mutual information of y and θ, ≥ 0

Out-of-distribution detection scores each point by TU or EU and reports the AUROC of
that score separating in-distribution points (label 0) from OOD points (label 1), as
Table 1 of the posteriors paper does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from bayesflow.evaluate.ranks import average_ranks

__all__ = ["Uncertainty", "auroc", "decompose_uncertainty", "entropy", "ood_auroc"]


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def entropy(probs: Any) -> np.ndarray:
    """Shannon entropy in nats over the last axis, with 0 · log 0 = 0.

    Args:
        probs: (..., C) probabilities.

    Returns:
        (...) entropies.
    """
    probabilities = _as_numpy(probs)
    positive = probabilities > 0
    logs = np.log(np.where(positive, probabilities, 1.0))
    return np.asarray(-(probabilities * logs).sum(axis=-1))


class Uncertainty(NamedTuple):
    """Per-point total, aleatoric and epistemic uncertainty (nats), each (n,)."""

    total: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray


def decompose_uncertainty(sample_probs: Any) -> Uncertainty:
    """TU = H[p̄(y|x)], AU = mean over samples of H[p(y|x,θₛ)], EU = TU − AU.

    Args:
        sample_probs: (S, n, C) class probabilities of each parameter sample.

    Returns:
        :class:`Uncertainty` of (n,) arrays. EU is the mutual information, non-negative
        by Jensen's inequality; rounding below zero (about 1e-16) is clipped to 0.
    """
    per_sample = _as_numpy(sample_probs)
    if per_sample.ndim != 3:
        raise ValueError(f"expected sample_probs of shape (S, n, C), got {per_sample.shape}")
    total = entropy(per_sample.mean(axis=0))
    aleatoric = entropy(per_sample).mean(axis=0)
    return Uncertainty(total, aleatoric, np.maximum(total - aleatoric, 0.0))


def auroc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve of ``scores`` for telling label 1 from label 0.

    Computed as the Mann–Whitney statistic: the probability that a random positive
    scores above a random negative, ties counting one half, via average ranks::

        AUROC = (R₁ − n₁(n₁ + 1)/2) / (n₀ n₁),   R₁ = sum of the positives' ranks

    Args:
        scores: (n,) scores, higher meaning "more likely label 1".
        labels: (n,) labels in {0, 1}.

    Returns:
        AUROC in [0, 1]; 0.5 is chance, 1 a perfect separation.
    """
    values = _as_numpy(scores).reshape(-1)
    targets = np.asarray(_as_numpy(labels).reshape(-1))
    if values.shape != targets.shape:
        raise ValueError(
            f"expected scores and labels of one shape, got {values.shape} and {targets.shape}"
        )
    if not np.isin(targets, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1, got {sorted(set(targets.tolist()))}")
    positives = int(targets.sum())
    negatives = targets.shape[0] - positives
    if positives == 0 or negatives == 0:
        raise ValueError(
            f"AUROC needs both labels, got {negatives} with label 0 and {positives} with label 1"
        )
    ranks = average_ranks(values)  # tied scores share their mean rank
    rank_sum = ranks[targets == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2) / (positives * negatives))


def ood_auroc(in_distribution_scores: Any, ood_scores: Any) -> float:
    """AUROC of a score that should be higher on OOD points (label 1) than in-distribution (0).

    Args:
        in_distribution_scores: (n₀,) scores of in-distribution test points.
        ood_scores: (n₁,) scores of out-of-distribution points.
    """
    inside = _as_numpy(in_distribution_scores).reshape(-1)
    outside = _as_numpy(ood_scores).reshape(-1)
    labels = np.concatenate([np.zeros(inside.shape[0]), np.ones(outside.shape[0])])
    return auroc(np.concatenate([inside, outside]), labels)
