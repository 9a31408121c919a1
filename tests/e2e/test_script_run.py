"""A user's script that calls ``bayesflow.run`` at its top level, with no
``if __name__ == "__main__"`` guard: the tracking worker process must not run it again
(``multiprocessing``'s spawn would re-run the script's ``__main__`` in the child)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.helpers import workflow

pytestmark = pytest.mark.e2e

SCRIPT = """\
import bayesflow

result = bayesflow.run("spec.yaml")
print("RUNS", len(result.fit_runs), result.outcome.ok)
"""


def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    workflow(tmp_path)
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("RUNS") == 1 and "RUNS 2 True" in done.stdout, done.stdout

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.search_experiments()[0]
    runs = client.search_runs([experiment.experiment_id])
    parents = [run for run in runs if run.data.tags.get("bayesflow.role") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert all(run.info.status == "FINISHED" for run in runs)
    # The runs carry the script's process id, not the worker's.
    assert {run.data.tags["bayesflow.pid"] for run in runs} == {parents[0].data.tags["bayesflow.pid"]}
