"""Case ``kfac``: KFAC Laplace against laplace-torch on the digits MLP.

The case is :mod:`benchmarks.speed.kfac.case` (what is timed, and how), its table
:mod:`benchmarks.speed.kfac.table` and the memory probe :mod:`benchmarks.speed.kfac.memory`, run in a
process of its own.
"""
