"""Case ``kfac``: KFAC Laplace against laplace-torch on the digits MLP.

The case is :mod:`benchmarks.kfac.case` (what is timed, and how), its table
:mod:`benchmarks.kfac.table` and the memory probe :mod:`benchmarks.kfac.memory`, run in a
process of its own.
"""
