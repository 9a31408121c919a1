"""End to end: the real command line, a real MLflow SQLite store, a real Jupyter kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY_SPEC, write

pytestmark = pytest.mark.e2e
BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]


def bayesflow(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command line in ``cwd`` and return what it printed."""
    environment = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*BAYESFLOW, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=environment
    )


@pytest.fixture(scope="session")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One real run of the tiny workflow, shared by the tests of this module and by the
    xdist workers: the first worker to ask runs it under a file lock in the session's
    shared temporary folder, the others read its result (pytest 9 with xdist 3.8 does
    not honour ``xdist_group``, so the smoke tests may land on different workers)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent
    folder, record = shared / "e2e-first-run", shared / "e2e-first-run.json"
    with FileLock(str(shared / "e2e-first-run.lock")):
        if not record.is_file():
            folder.mkdir(exist_ok=True)
            write(folder, TINY_SPEC)
            result = bayesflow(folder, "run", "spec.yaml")
            record.write_text(json.dumps([result.returncode, result.stdout, result.stderr]))
    returncode, stdout, stderr = json.loads(record.read_text())
    return folder, subprocess.CompletedProcess([*BAYESFLOW, "run", "spec.yaml"], returncode, stdout, stderr)


@pytest.fixture(scope="module")
def own_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A run of the tiny workflow for the tests that change what a run left (a rerun, a
    deleted report): this worker's own, so the readers of ``first_run`` never see it change."""
    folder = tmp_path_factory.mktemp("e2e-own")
    write(folder, TINY_SPEC)
    return folder, bayesflow(folder, "run", "spec.yaml")


def client(folder: Path):
    """An MLflow client on the run's store."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")


@pytest.mark.smoke
def test_run_succeeds_and_says_where_things_are(first_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """`bayesflow run` exits 0 and prints the store URI and the report path."""
    folder, result = first_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"MLflow tracking URI: sqlite:///{folder / 'mlflow.db'}" in result.stderr
    assert "report: reports/tiny/" in result.stdout


@pytest.mark.smoke
def test_runs_follow_the_contract(first_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """One parent, one child per fit with the sweep params, metrics and posterior artifact."""
    folder, _ = first_run
    mlflow = client(folder)
    experiment = mlflow.get_experiment_by_name("tiny")
    runs = mlflow.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("bayesflow.role") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    # map once (shared), laplace and sghmc at two temperatures: 5 fits
    assert sorted((r.data.params["method"], r.data.params["temperature"]) for r in children) == [
        ("laplace", "0.1"), ("laplace", "1.0"), ("map", "0.0"), ("sghmc", "0.1"), ("sghmc", "1.0")
    ]
    for run in children:
        assert {"method", "engine", "temperature", "seed"} <= set(run.data.params)
        assert {"test_nll", "test_accuracy", "test_ece", "test_brier", "fit_seconds", "steps"} <= set(run.data.metrics)
        assert 0.0 <= run.data.metrics["test_accuracy"] <= 1.0
        path = mlflow.download_artifacts(run.info.run_id, "posterior/posterior.npz", str(folder))
        arrays = np.load(path)
        assert "param_names" in arrays and ("samples" in arrays or {"mean", "var"} <= set(arrays))


@pytest.mark.smoke
def test_report_is_one_self_contained_html(first_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """The report HTML embeds its figures and is logged to the parent run."""
    folder, _ = first_run
    (html,) = folder.glob("reports/tiny/*/report.html")
    text = html.read_text()
    assert text.count("data:image/png;base64") >= 2
    assert "<img src=\"http" not in text
    assert (html.parent / "report.ipynb").exists()
    mlflow = client(folder)
    parent_id = html.parent.name
    logged = [item.path for item in mlflow.list_artifacts(parent_id, "report")]
    assert sorted(logged) == ["report/report.html", "report/report.ipynb"]


def test_rerun_is_a_no_op_and_duplicates_nothing(own_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """A second run reuses every stage; its parent gets a child per fit pointing to the
    first parent's run that computed it, and the first parent keeps its children."""
    folder, _ = own_run
    plan = bayesflow(folder, "plan", "spec.yaml", "--json")
    statuses = {row["stage"]: row["status"] for row in json.loads(plan.stdout)}
    assert all(statuses[name] == "cached" for name in statuses if name.startswith(("fit/", "evaluate/")))
    again = bayesflow(folder, "run", "spec.yaml")
    assert again.returncode == 0, again.stderr
    assert "stages: 0 ran, 14 cached" in again.stdout  # plots and the report too
    mlflow = client(folder)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    fits = [r for r in runs if r.data.tags.get("bayesflow.role") == "fit"]
    oldest, newest = sorted((r for r in runs if r.data.tags.get("bayesflow.role") == "parent"), key=lambda r: r.info.start_time)
    children = {parent.info.run_id: {r.data.tags["bayesflow.stage"]: r for r in fits
                                     if r.data.tags["mlflow.parentRunId"] == parent.info.run_id} for parent in (oldest, newest)}
    first, second = children[oldest.info.run_id], children[newest.info.run_id]
    assert len(fits) == 10 and len(first) == len(second) == 5
    for stage, run in second.items():
        assert run.data.tags["bayesflow.computed_by"] == first[stage].info.run_id
        assert run.data.metrics == first[stage].data.metrics


def test_diverging_cell_fails_alone(tmp_path: Path) -> None:
    """A chain that diverges fails its own stage; the others finish; exit code 1."""
    text = TINY_SPEC.replace("    lr: 0.01\n    epochs: 3\n    chains: 2", "    lr: 1.0e+6\n    epochs: 3\n    chains: 2")
    write(tmp_path, text.replace("evaluate:", "report: {enabled: false}\nevaluate:"))
    result = bayesflow(tmp_path, "run", "spec.yaml", "temperatures=[1.0]")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "fit/sghmc/T=1/seed=0" in result.stdout and "diverged" in result.stdout
    assert "method 'sghmc' (sghmc) at temperature 1, seed 0" in result.stdout
    mlflow = client(tmp_path)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    status = {r.data.tags.get("bayesflow.stage"): r.info.status for r in runs if r.data.tags.get("bayesflow.role") == "fit"}
    assert status == {
        "fit/map/T=shared/seed=0": "FINISHED", "fit/laplace/T=1/seed=0": "FINISHED", "fit/sghmc/T=1/seed=0": "FAILED"
    }


def test_invalid_spec_exits_3_without_traceback(tmp_path: Path) -> None:
    """An invalid spec exits 3 with the problem located, no traceback."""
    write(tmp_path, TINY_SPEC.replace("seeds:", "seedz:"))
    result = bayesflow(tmp_path, "run", "spec.yaml")
    assert result.returncode == 3
    assert "spec.yaml:15:1: seedz: unknown key `seedz`; did you mean `seeds`?" in result.stderr
    assert "Traceback" not in result.stderr


def test_report_rerenders_from_the_store(own_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """`bayesflow report RUN` renders the report again from MLflow, refitting nothing."""
    folder, _ = own_run
    (html,) = sorted(folder.glob("reports/tiny/*/report.html"))[:1]
    html.unlink()
    result = bayesflow(folder, "report", html.parent.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert html.exists() and html.read_text().count("data:image/png;base64") >= 2
    assert "Kernel is running over TCP" not in result.stderr
