"""The no-op rerun of a small run, from the command line (issue 22).

``bayesflow run cold_posterior seeds=[0] temperatures=[1]`` in a fresh temporary folder
(its own MLflow store and cache), then the same command again, ``repeats`` times, with
nothing to compute. A user pays the interpreter's start and every import from the
command line, which the in-process no-op of the workflow case (``benchmarks/speed/workflow.py``)
does not see; on a run this small they are most of a no-op. Reported: the full run's wall,
each rerun's wall and CPU seconds (user + system of the command and its children: the
tracking worker), their medians and the ratio of the medians' walls to the full run's.

    python -m benchmarks.studies.noop [--repeats 3] [--code PATH]   # PATH: a bayesflow tree to time

``--code`` puts another checkout first on ``PYTHONPATH`` (an earlier commit, for a
before/after on one machine at one load); by default this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import ROOT

__all__ = ["COMMAND", "main", "measure"]

COMMAND = ["run", "cold_posterior", "seeds=[0]", "temperatures=[1]", "execution.device=cpu"]


def _timed(code: Path, folder: Path) -> tuple[float, float, str]:
    """One ``bayesflow run`` in ``folder``: wall seconds, CPU seconds, its stdout."""
    environment = {**os.environ, "PYTHONPATH": str(code), "COLUMNS": "200"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", *COMMAND], cwd=folder, env=environment,
        capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"bayesflow run failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def measure(repeats: int = 3, code: Path = ROOT) -> dict[str, Any]:
    """The full small run once, then ``repeats`` no-op reruns, in one temporary folder."""
    with tempfile.TemporaryDirectory(prefix="bayesflow-noop-") as name:
        folder = Path(name)
        full_wall, full_cpu, _ = _timed(code, folder)
        reruns = [_timed(code, folder) for _ in range(repeats)]
    for _, _, stdout in reruns:
        if " 0 ran," not in stdout:
            raise RuntimeError(f"the rerun computed something: {stdout[-1000:]}")
    walls = [wall for wall, _, _ in reruns]
    cpus = [cpu for _, cpu, _ in reruns]
    return {
        "command": "bayesflow " + " ".join(COMMAND),
        "full_wall_s": full_wall,
        "full_cpu_s": full_cpu,
        "noop_wall_s": walls,
        "noop_cpu_s": cpus,
        "noop_wall_median_s": statistics.median(walls),
        "noop_cpu_median_s": statistics.median(cpus),
        "ratio": statistics.median(walls) / full_wall,
        "load_average": list(os.getloadavg()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.noop", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code", type=Path, default=ROOT, help="the bayesflow tree to time")
    arguments = parser.parse_args(argv)
    print(json.dumps(measure(arguments.repeats, arguments.code), indent=1))


if __name__ == "__main__":
    main()
