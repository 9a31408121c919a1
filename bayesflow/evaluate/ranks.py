"""Average ranks, shared by the AUROC and the rank-normalised R-hat.

Written with numpy rather than taken from ``scipy.stats.rankdata`` because importing
``scipy.stats`` costs about 1.2 s (measured with ``python -X importtime``), and the
tracking hook imports this package only for its conventions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["average_ranks"]


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of all entries of ``values``, tied entries sharing their mean rank.

    Args:
        values: an array of any shape; ranked as one flat set.

    Returns:
        float64 ranks of the same shape.
    """
    flat = np.asarray(values).reshape(-1)
    order = np.argsort(flat, kind="mergesort")
    ordered = flat[order]
    starts_group = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(starts_group)
    ends = np.r_[starts[1:], flat.size]
    # A tie group at sorted positions s … e−1 holds ranks s+1 … e, whose mean is (s+1+e)/2.
    group_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(flat.size)
    ranks[order] = group_rank[np.cumsum(starts_group) - 1]
    return ranks.reshape(np.shape(values))
