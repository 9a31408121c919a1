"""Benchmarks of bayesflow against the posteriors library, run side by side in one process.

Issues 7 and 16: each case runs the same model, data, hyper-parameters and step counts through a
bayesflow engine and through its posteriors 0.1.x equivalent, and reports the ratio of
times. ``python -m benchmarks.run`` runs every case and writes
``benchmarks/results/<date>-<device>.json`` and ``docs/benchmarks.md``.

Modules, one per case:

- :mod:`benchmarks.timing`: the clock (``perf_counter``, warm-up, repeats, median).
- :mod:`benchmarks.problems`: the Pima and digits problems, seen by both libraries.
- :mod:`benchmarks.peers`: the posteriors transforms matching each bayesflow engine,
  looped over chains and stacked in one (K, d) state.
- :mod:`benchmarks.floor`: the hand-written flat-tensor SGHMC loop, the floor.
- :mod:`benchmarks.pima`: logistic regression on Pima, per step of one chain.
- :mod:`benchmarks.chains`: K chains on Pima against posteriors stacked and looped and the floor.
- :mod:`benchmarks.digits`: the digits MLP, per epoch of each engine.
- :mod:`benchmarks.grids`: temperature grids and the paper's parallel SGHMC.
- :mod:`benchmarks.workflow`: the default workflow end to end, tracking and report shares.
- :mod:`benchmarks.report`: the targets and the doc; :mod:`benchmarks.tables`: its tables.
- :mod:`benchmarks.provenance`: commit, machine, device and library versions of a run.
"""

from __future__ import annotations

__all__: list[str] = []
