"""bayesflow's benchmarks, grouped by what they answer.

docs/benchmarks.md opens with the index: for each benchmark the question it answers, the
command that runs it, the doc that reports it and its results file. The folders:

- :mod:`benchmarks.common`: the helpers every group uses (the clock, the problems both
  libraries see, the posteriors side of a comparison, a run's provenance);
- :mod:`benchmarks.speed`: the speed suite ``make bench`` runs
  (``python -m benchmarks.speed.run``), one case per question;
- :mod:`benchmarks.parity`: the peer-parity study (``python -m benchmarks.parity.run``) and
  its noise diagnostic;
- :mod:`benchmarks.studies`: one-off studies, each one entry point;
- ``benchmarks/results/<benchmark>/``: the results files, one folder per benchmark.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RESULTS", "ROOT"]

# The repository's root (the working folder of the subprocesses a benchmark starts), and
# the folder of every benchmark's results files.
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
