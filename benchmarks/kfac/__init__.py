"""Case ``kfac``: KFAC Laplace against laplace-torch on the digits MLP.

The default workflow's MLP on sklearn digits (898 training images, one hidden layer of
64 ReLU units, d = 4,810, prior variance 0.5), at the initialisation shared by both. One
curvature fit is, for both libraries, one full-batch pass that builds the Kronecker
factors and their eigendecompositions:

- bayesflow: ``laplace_kfac_ggn`` / ``laplace_kfac_fisher``, the engine's ``update`` on the
  whole training set then ``posterior`` (eigendecompositions, and the marginal variances,
  which laplace-torch's ``fit`` does not compute);
- laplace-torch: ``Laplace(..., hessian_structure="kron")`` with ``CurvlinopsGGN`` (exact
  KFAC of the GGN) / ``CurvlinopsEF``, ``fit`` on one DataLoader batch of 898.

Seconds are timed interleaved (:func:`benchmarks.timing.compare`). Peak memory is the
growth of the peak resident set size of a fresh process over one fit (on the CPU; on a
GPU ``torch.cuda.max_memory_allocated``), :mod:`benchmarks.kfac.memory`. Before any
timing, the two libraries' Kronecker factors are compared (their largest relative
difference is reported; ``tests/engines/test_laplace_kfac.py`` holds the exact checks).

The case is :mod:`benchmarks.kfac.case`, its table :mod:`benchmarks.kfac.table` and the
memory probe :mod:`benchmarks.kfac.memory`, run in a process of its own.
"""
