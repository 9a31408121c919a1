"""Kernelised Stein discrepancy of a sample set against a target known through its score.

The Langevin Stein kernel of a base kernel k and target score s = ∇ log p
(Gorham & Mackey 2015, https://arxiv.org/abs/1506.03039; Liu, Lee & Jordan 2016,
https://arxiv.org/abs/1602.03253; Chwialkowski et al. 2016)::

    k_p(x, y) = s(x)·s(y) k(x, y) + s(x)·∇_y k(x, y) + s(y)·∇_x k(x, y) + ∇_x·∇_y k(x, y)

has E_{x,y∼p} k_p(x, y) = 0, so the V-statistic KSD = √((1/n²) Σᵢⱼ k_p(xᵢ, xⱼ)) of
samples xᵢ shrinks to 0 at rate n^{-1/2} when they come from p and stays away from 0
when they do not. With r = x − y, D = (s(y) − s(x))·r and d the dimension:

- IMQ, k = u^β with u = c² + ‖r‖²/h² (Gorham & Mackey 2017 use c = 1, β = −1/2, and
  prove this kernel detects non-convergence)::

      k_p = s(x)·s(y) u^β + (2β/h²) u^{β−1} D − (2βd/h²) u^{β−1} − (4β(β−1)/h⁴) u^{β−2} ‖r‖²

- RBF, k = exp(−‖r‖²/(2h²))::

      k_p = k [s(x)·s(y) − D/h² + d/h² − ‖r‖²/h⁴]

The tests check this kernel against autograd of the definition above.

:func:`posteriors_example_ksd` is another quantity: the estimator of the posteriors
library's Pima example (``examples/pyro_pima_indians/ksd.py``), whose numbers are the KSD
column of the posteriors paper's Table 3 (Duffield et al., 2025). It differs from the
KSD above in three ways: the Gaussian kernel at h = 1; the cross terms with the opposite
sign, ``−s(x)·∇_y k − s(y)·∇_x k``; and it is meant for the score of the log posterior
*divided by N* (the library's per-datum normalisation), which shrinks the score terms
N-fold against the kernel's own. It is reproduced here only to put numbers beside the
paper's; it is not a Stein discrepancy (its terms do not average to 0 under p).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from torch import Tensor
from torch.func import grad, vmap

__all__ = [
    "KERNELS",
    "kernelized_stein_discrepancy",
    "median_bandwidth",
    "posteriors_example_ksd",
    "stein_kernel_matrix",
    "stein_scores",
]

KERNELS: tuple[str, ...] = ("imq", "rbf")

# The median heuristic looks at the pairwise distances of at most this many evenly
# spaced samples: 1,000 points are 499,500 distances, plenty for a median.
MEDIAN_POINTS = 1000

# Rows of the n × n Stein kernel matrix summed at once: 512 × 10,000 float64 is 41 MB.
ROW_BLOCK = 512


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


def median_bandwidth(samples: Any, max_points: int = MEDIAN_POINTS) -> float:
    """The median heuristic: the median Euclidean distance between distinct samples.

    Args:
        samples: (n, d) samples (or (n,) for d = 1).
        max_points: at most this many evenly spaced samples are compared.
    """
    points = _as_numpy(samples)
    if points.shape[0] > max_points:
        points = points[np.linspace(0, points.shape[0] - 1, max_points).round().astype(int)]
    squared = _squared_distances(points, points)
    upper = np.sqrt(squared[np.triu_indices(points.shape[0], k=1)])
    median = float(np.median(upper)) if upper.size else 0.0
    if median <= 0:
        raise ValueError("the median heuristic needs at least two distinct samples")
    return median


def _squared_distances(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    squared = (
        (rows**2).sum(1)[:, None] + (columns**2).sum(1)[None, :] - 2.0 * rows @ columns.T
    )
    return np.maximum(squared, 0.0)


def _stein_block(
    rows: tuple[np.ndarray, np.ndarray],
    columns: tuple[np.ndarray, np.ndarray],
    kernel: str,
    bandwidth: float,
    offset: float,
    exponent: float,
) -> np.ndarray:
    """k_p(xᵢ, xⱼ) for the (samples, scores) ``rows`` against the ``columns``."""
    x_rows, s_rows = rows
    x_columns, s_columns = columns
    dimension = x_rows.shape[1]
    squared = _squared_distances(x_rows, x_columns)
    score_products = s_rows @ s_columns.T
    # D = (s(y) − s(x))·(x − y), expanded into four inner products so no (b, m, d) tensor
    # is formed.
    cross = (
        x_rows @ s_columns.T
        - (s_columns * x_columns).sum(1)[None, :]
        - (s_rows * x_rows).sum(1)[:, None]
        + s_rows @ x_columns.T
    )
    h2 = bandwidth**2
    if kernel == "imq":
        base = offset**2 + squared / h2
        beta = exponent
        return (
            score_products * base**beta
            + (2 * beta / h2) * base ** (beta - 1) * cross
            - (2 * beta * dimension / h2) * base ** (beta - 1)
            - (4 * beta * (beta - 1) / h2**2) * base ** (beta - 2) * squared
        )
    if kernel == "rbf":
        value = np.exp(-squared / (2 * h2))
        return value * (score_products - cross / h2 + dimension / h2 - squared / h2**2)
    raise ValueError(f"kernel must be one of {list(KERNELS)}, got {kernel!r}")


def _resolve_bandwidth(samples: np.ndarray, bandwidth: float | str) -> float:
    if bandwidth == "median":
        return median_bandwidth(samples)
    if isinstance(bandwidth, str) or not bandwidth > 0:
        raise ValueError(f"bandwidth must be 'median' or a positive number, got {bandwidth!r}")
    return float(bandwidth)


def stein_kernel_matrix(
    samples: Any,
    scores: Any,
    kernel: str = "imq",
    bandwidth: float | str = 1.0,
    offset: float = 1.0,
    exponent: float = -0.5,
) -> np.ndarray:
    """The (n, n) Langevin Stein kernel matrix k_p(xᵢ, xⱼ) (module docstring).

    Args:
        samples: (n, d) samples (or (n,) for d = 1).
        scores: (n, d) ∇ log p at each sample.
        kernel: ``"imq"`` or ``"rbf"``.
        bandwidth: h, a positive number or ``"median"`` (:func:`median_bandwidth`).
        offset: c of the IMQ kernel.
        exponent: β of the IMQ kernel, in (−1, 0).
    """
    points, gradients = _as_numpy(samples), _as_numpy(scores)
    scale = _resolve_bandwidth(points, bandwidth)
    pair = (points, gradients)
    return _stein_block(pair, pair, kernel, scale, offset, exponent)


def kernelized_stein_discrepancy(
    samples: Any,
    scores: Any,
    kernel: str = "imq",
    bandwidth: float | str = 1.0,
    offset: float = 1.0,
    exponent: float = -0.5,
) -> float:
    """KSD = √((1/n²) Σᵢⱼ k_p(xᵢ, xⱼ)), the V-statistic, in O(n²d) time and O(n) blocks.

    The defaults are the IMQ kernel of Gorham & Mackey (2017), c = 1, β = −1/2, with a
    fixed h = 1 so that every method is measured with the same kernel; ``"median"``
    picks h from the samples instead.

    Args:
        samples: (n, d) samples (or (n,) for d = 1).
        scores: (n, d) the target's score ∇ log p at each sample (:func:`stein_scores`).
        kernel, bandwidth, offset, exponent: see :func:`stein_kernel_matrix`.

    Returns:
        The KSD, ≥ 0 (rounding below zero is clipped).
    """
    points, gradients = _as_numpy(samples), _as_numpy(scores)
    if points.shape != gradients.shape:
        raise ValueError(
            f"expected samples and scores of one shape, got {points.shape} and {gradients.shape}"
        )
    scale = _resolve_bandwidth(points, bandwidth)
    total = 0.0
    for start in range(0, points.shape[0], ROW_BLOCK):
        rows = (points[start : start + ROW_BLOCK], gradients[start : start + ROW_BLOCK])
        block = _stein_block(rows, (points, gradients), kernel, scale, offset, exponent)
        total += float(block.sum())
    return float(np.sqrt(max(total / points.shape[0] ** 2, 0.0)))


def stein_scores(log_density: Callable[[Tensor], Tensor], samples: Tensor) -> Tensor:
    """∇ log p at each sample, by ``vmap(grad(log_density))``.

    For the Bayes posterior of a problem use the full-data log density, for example
    ``lambda params: problem.num_data * problem.log_posterior(params, (x_train, y_train))``
    (any constant factor other than N would change the target).

    Args:
        log_density: ``params (d,) -> ()``, log p up to a constant.
        samples: (n, d) samples.

    Returns:
        (n, d) scores, detached.
    """
    return vmap(grad(log_density))(samples).detach()


def posteriors_example_ksd(samples: Any, normalised_scores: Any) -> float:
    """The KSD column of the posteriors paper's Table 3, as its example code computes it.

    With r = x − y, k = exp(−‖r‖²/2) and g the score of the log posterior divided by N
    (``normalised_scores``), the pair term is ``k · [d − ‖r‖² + r·g(y) − r·g(x) + g(x)·g(y)]``
    and the value is √(mean over all pairs). The example averages each row over 100
    columns drawn at random with replacement instead of all n, an unbiased estimate of
    the same row mean; the full mean here removes that noise. See the module docstring
    for how this differs from :func:`kernelized_stein_discrepancy`.

    Args:
        samples: (n, d) samples (or (n,) for d = 1).
        normalised_scores: (n, d) ∇ log p / N at each sample.
    """
    points, gradients = _as_numpy(samples), _as_numpy(normalised_scores)
    if points.shape != gradients.shape:
        raise ValueError(
            f"expected samples and scores of one shape, got {points.shape} and {gradients.shape}"
        )
    dimension, total = points.shape[1], 0.0
    for start in range(0, points.shape[0], ROW_BLOCK):
        rows, row_scores = points[start : start + ROW_BLOCK], gradients[start : start + ROW_BLOCK]
        squared = _squared_distances(rows, points)
        # r·g(y) − r·g(x) with r = x − y, x the rows and y the columns, as four inner products.
        cross = (
            rows @ gradients.T
            - (points * gradients).sum(1)[None, :]
            - (rows * row_scores).sum(1)[:, None]
            + row_scores @ points.T
        )
        kernel = np.exp(-squared / 2)
        total += float((kernel * (dimension - squared + cross + row_scores @ gradients.T)).sum())
    return float(np.sqrt(max(total / points.shape[0] ** 2, 0.0)))
