"""A rerun with nothing to compute, through the real command line: it still makes its
MLflow parent run and links every reused fit, and imports nothing a computation needs (torch, scikit-learn: the split is remembered)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TINY_SPEC, write
from tests.e2e.test_cli import BAYESFLOW, bayesflow, client

pytestmark = pytest.mark.e2e


def test_a_no_op_rerun_logs_its_parent_and_does_not_import_torch(tmp_path: Path) -> None:
    write(tmp_path, TINY_SPEC)
    first = bayesflow(tmp_path, "run", "spec.yaml")
    assert first.returncode == 0, first.stdout + first.stderr
    # -X importtime lists every module the command's own process imports (the tracking
    # worker, a process of its own, imports mlflow).
    rerun = subprocess.run(
        [BAYESFLOW[0], "-X", "importtime", *BAYESFLOW[1:], "run", "spec.yaml"], cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr[-3000:]
    assert re.search(r"stages: 0 ran, (\d+) cached, 0 failed", rerun.stdout), rerun.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in rerun.stderr.splitlines() if line.startswith("import time:")}
    assert "bayesflow.api" in imported  # the listing is there
    assert not {"torch", "sklearn", "jupyter_client", "papermill"} & imported
    mlflow = client(tmp_path)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    parents = sorted((run for run in runs if run.data.tags.get("bayesflow.role") == "parent"),
                     key=lambda run: run.info.start_time)
    assert [run.info.status for run in parents] == ["FINISHED", "FINISHED"]
    reused = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parents[1].info.run_id]
    computed = {run.info.run_id for run in runs if run.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    fits = [run for run in reused if run.data.tags.get("bayesflow.role") == "fit"]
    assert len(fits) == 1 + 2 + 2  # map shared; laplace and sghmc at two temperatures
    assert all(run.data.tags["bayesflow.computed_by"] in computed for run in fits)
