"""How closely two float results must agree, and how many torch threads the tests use.

Bit-for-bit equality holds only when the very same computation repeats: the same shapes, the
same kernel and the same thread count (a determinism check, a cache hit, a resume, a seed's
replay). Wherever the shapes, the batching, the chunking, the thread count or the CPU kernel
differ (torch picks SSE, AVX2 or AVX-512 kernels by CPU; ``ATEN_CPU_CAPABILITY`` forces one),
the sums inside run in another order and round differently: a chain run inside a batch of
chains differs from the same chain run alone by 2.8e-17 on an Intel Xeon and not at all on the
machine the test was written on.

Summing ``n`` terms in two orders gives results that differ by at most about
``n · eps · Σ|xᵢ|`` (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2: each
order is within ``γ_{n-1} Σ|xᵢ| ≈ (n-1)(eps/2) Σ|xᵢ|`` of the exact sum). A computation of
``steps`` such sums in sequence (an optimiser or a sampler) carries each step's difference
into the next; for the short, stable runs of these tests the differences add up, so the
bound is multiplied by ``steps``. The bound is a worst case: typical differences are far
smaller (about ``√n · eps``), so a test that passes at this tolerance still catches any
real change of the computation, which moves results by many orders of magnitude more.
"""

from __future__ import annotations

import os
from typing import Any

THREADS_VARIABLE = "BAYESFLOW_TEST_THREADS"


def eps(dtype: Any) -> float:
    """Machine epsilon of a torch or NumPy floating dtype."""
    if hasattr(dtype, "is_floating_point"):  # a torch.dtype
        import torch

        return float(torch.finfo(dtype).eps)
    import numpy as np

    return float(np.finfo(dtype).eps)


def sum_tolerance(dtype: Any, terms: int, steps: int = 1) -> float:
    """Relative tolerance between two results of ``steps`` sequential sums of ``terms``
    addends each, computed in a different order (batching, chunking, threads or kernel).

    Args:
        dtype: the floating dtype the sums ran in (torch or NumPy).
        terms: how many addends the largest sum of one step has (a batch size, a matrix
            product's inner dimension, a number of draws).
        steps: how many such sums feed each other in sequence (1 for one evaluation).

    Returns:
        ``terms · steps · eps(dtype)``: the worst-case bound of the module docstring.
    """
    return max(terms, 1) * max(steps, 1) * eps(dtype)


def reordered(dtype: Any, terms: int, steps: int = 1, scale: float = 1.0) -> dict[str, float]:
    """Keyword arguments ``rtol`` and ``atol`` for ``torch.testing.assert_close`` or
    ``numpy.testing.assert_allclose`` between two results that differ only in the order
    of their sums.

    ``atol`` is the relative bound times ``scale``, the size of the values summed: it covers
    results that cancel to near zero, where a relative tolerance alone asks for more digits
    than the addends carry.
    """
    tolerance = sum_tolerance(dtype, terms, steps)
    return {"rtol": tolerance, "atol": tolerance * scale}


def torch_threads(default: int = 1) -> int:
    """The intra-op thread count tests set for torch: ``BAYESFLOW_TEST_THREADS`` when set
    (``make test-kernels`` runs the suite under 1 and 2), else ``default``."""
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_VARIABLE}={value!r}: expected a positive integer, e.g. 1 or 2")
    return int(value)
