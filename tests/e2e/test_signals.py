"""Stopping a run from outside: SIGTERM to the run, SIGTERM to its whole process group (as
`timeout`, systemd and Slurm send it), and the tracking worker killed alone.

Each test runs the real command line on the tiny workflow with a real MLflow SQLite store,
waits until some stages are in the cache (a condition, not a delay; the deadline only
guards against a hang) and signals it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import TINY_SPEC, write
from tests.e2e.test_cli import BAYESFLOW, bayesflow, client

pytestmark = pytest.mark.e2e

# Four temperatures and SGHMC fits long enough (~0.5 s each) that a signal sent once a few
# stages have finished lands while the run is still going, however fast the engines.
SPEC = (
    TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [0.03, 0.1, 0.3, 1.0]")
    .replace("evaluate:", "report: {enabled: false}\nevaluate:")
    .replace("lr: 0.01\n    epochs: 3\n    chains: 2", "lr: 0.01\n    epochs: 300\n    chains: 2")
)
HANG_GUARD = 300  # seconds: only a run that hangs gets near it
STOPPED = re.compile(
    r"bayesflow: stopped by SIGTERM; (\d+) of (\d+) stages finished and logged, (\d+) not run; "
    r"rerun the same command to finish"
)


def start(folder: Path, spec: str = SPEC) -> subprocess.Popen[str]:
    """``bayesflow run spec.yaml`` in ``folder``, leading a process group of its own."""
    write(folder, spec)
    return subprocess.Popen(
        [*BAYESFLOW, "run", "spec.yaml"], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )


def finished_entries(folder: Path) -> list[Path]:
    cache = folder / ".bayesflow" / "cache"
    return list(cache.glob("*/outputs.json")) if cache.exists() else []


def wait_for_entries(folder: Path, process: subprocess.Popen[str], count: int) -> None:
    """Until ``count`` stages are in the cache (the run must still be going)."""
    deadline = time.monotonic() + HANG_GUARD
    while len(finished_entries(folder)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no stage finished: the run hangs"
        time.sleep(0.05)


def tracking_worker(process: subprocess.Popen[str]) -> psutil.Process:
    """The run's tracking worker process (python -m bayesflow.tracking.worker)."""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        for child in psutil.Process(process.pid).children(recursive=True):
            if "bayesflow.tracking.worker" in " ".join(child.cmdline()):
                return child
        time.sleep(0.05)
    raise AssertionError("the run started no tracking worker process")


def runs_by_role(folder: Path) -> dict[str, list]:
    mlflow = client(folder)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    found: dict[str, list] = {}
    for run in runs:
        found.setdefault(run.data.tags.get("bayesflow.role", ""), []).append(run)
    return found


def parent_is_running(folder: Path) -> bool:
    """Whether the run's parent run is in the store, RUNNING. Read with sqlite3, read-only:
    an MLflow client would create the store's tables itself, racing the run's worker."""
    database = folder / "mlflow.db"
    if not database.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)) as store:
            rows = store.execute(
                "SELECT runs.status FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                "WHERE tags.key = 'bayesflow.role' AND tags.value = 'parent'"
            ).fetchall()
    except sqlite3.Error:  # the tables are being made
        return False
    return rows == [("RUNNING",)]


def assert_stopped_truthfully(folder: Path, process: subprocess.Popen[str], worker: psutil.Process) -> int:
    """Exit 143 with the one line; the parent KILLED with why; a FINISHED child for every
    fit in the cache and none left RUNNING; no staging and no worker left. Returns how
    many stages the line says finished."""
    stdout, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 143, stdout + stderr
    assert "Traceback" not in stderr
    found = STOPPED.search(stderr)
    assert found, stderr
    finished, total, left = (int(group) for group in found.groups())
    assert finished + left == total and 0 < finished < total
    runs = runs_by_role(folder)
    assert [(run.info.status, run.data.tags.get("bayesflow.error")) for run in runs["parent"]] == [
        ("KILLED", "stopped by SIGTERM")
    ]
    assert not any(run.info.status == "RUNNING" for group in runs.values() for run in group)
    fits_in_cache = {
        name for path in finished_entries(folder)
        if (name := _stage_of(path)).startswith("fit/")
    }
    assert {run.data.tags["bayesflow.stage"] for run in runs.get("fit", [])} == fits_in_cache
    assert all(run.info.status == "FINISHED" for run in runs.get("fit", []))
    cache = folder / ".bayesflow" / "cache"
    assert not [path for path in cache.iterdir() if path.name.startswith(".staging")]
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    return finished


def _stage_of(entry: Path) -> str:
    """The stage name a cache entry was written for (its index records it)."""
    import json

    index = entry.parents[1] / "index"
    for file in index.glob("*.json"):
        for name, record in json.loads(file.read_text()).items():
            if record.get("key") == entry.parent.name:
                return name
    return ""


def test_sigterm_stops_like_ctrl_c_and_a_rerun_finishes_the_rest(tmp_path: Path) -> None:
    """kill -TERM: exit 143, one line, the parent KILLED, finished fits logged; the rerun
    computes exactly the stages that had not finished."""
    process = start(tmp_path)
    worker = tracking_worker(process)
    wait_for_entries(tmp_path, process, 3)
    process.send_signal(signal.SIGTERM)
    finished = assert_stopped_truthfully(tmp_path, process, worker)
    done_before = len(finished_entries(tmp_path))

    result = bayesflow(tmp_path, "run", "spec.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    counts = re.search(r"stages: (\d+) ran, (\d+) cached, 0 failed, 0 skipped", result.stdout)
    assert counts, result.stdout
    ran, cached = int(counts.group(1)), int(counts.group(2))
    assert cached == done_before >= finished  # nothing that finished is computed again
    assert ran == len(finished_entries(tmp_path)) - done_before > 0
    runs = runs_by_role(tmp_path)
    computed: dict[str, int] = {}
    for run in runs["fit"]:
        assert run.info.status == "FINISHED"
        if "bayesflow.computed_by" not in run.data.tags:  # a run that computed its fit
            stage = run.data.tags["bayesflow.stage"]
            computed[stage] = computed.get(stage, 0) + 1
    assert len(computed) == 1 + 4 + 4 and set(computed.values()) == {1}
    assert sorted(run.info.status for run in runs["parent"]) == ["FINISHED", "KILLED"]


def test_sigterm_to_the_whole_process_group_keeps_the_tracking_worker_until_it_is_done(
    tmp_path: Path,
) -> None:
    """As `timeout` and Slurm do, and systemd to every process of the unit: every process
    gets SIGTERM, the tracking worker included; it logs what finished before it ends."""
    process = start(tmp_path)
    worker = tracking_worker(process)
    wait_for_entries(tmp_path, process, 2)
    everyone = psutil.Process(process.pid).children(recursive=True)
    os.killpg(process.pid, signal.SIGTERM)
    for child in everyone:  # those in a session of their own too (the tracking worker)
        if child.is_running():
            child.send_signal(signal.SIGTERM)
    assert_stopped_truthfully(tmp_path, process, worker)


@pytest.mark.parametrize("execution", ["{workers: 2}", "{executor: ray, workers: 2}"], ids=["pool", "ray"])
def test_sigterm_to_a_run_with_worker_processes_ends_them(tmp_path: Path, execution: str) -> None:
    """With `execution.workers: 2` the stages in flight run in a process pool, or in Ray's
    workers: the run ends them rather than waiting for their fits, and logs what finished
    (with Ray, after ray.init replaced the SIGTERM handler with its own)."""
    if "ray" in execution:
        pytest.importorskip("ray", reason="Ray is the optional extra bayesflow-workflows[ray]")
    process = start(tmp_path, SPEC.replace("evaluate:", f"execution: {execution}\nevaluate:"))
    worker = tracking_worker(process)
    wait_for_entries(tmp_path, process, 2)
    pool = [child for child in psutil.Process(process.pid).children(recursive=True) if child.pid != worker.pid]
    process.send_signal(signal.SIGTERM)  # to the run alone: its workers are not signalled
    assert_stopped_truthfully(tmp_path, process, worker)
    deadline = time.monotonic() + HANG_GUARD  # Ray's processes end a moment after the run
    while [child for child in pool if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, "a worker process outlived the stopped run"
        time.sleep(0.1)


def test_a_tracking_worker_killed_alone_fails_the_run_with_why(tmp_path: Path) -> None:
    """SIGKILL to the tracking worker: exit 1, a message naming its pid and signal, the
    parent FAILED with that message, no run left RUNNING."""
    process = start(tmp_path)
    worker = tracking_worker(process)
    wait_for_entries(tmp_path, process, 1)
    deadline = time.monotonic() + HANG_GUARD
    while not parent_is_running(tmp_path):  # the worker has opened the store
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    worker.kill()
    stdout, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    why = f"tracking worker process (pid {worker.pid}) was killed by SIGKILL"
    assert why in stdout + stderr
    assert "rerun the same command" in stdout + stderr
    runs = runs_by_role(tmp_path)
    [parent] = runs["parent"]
    assert parent.info.status == "FAILED" and why in parent.data.tags["bayesflow.error"]
    assert not any(run.info.status == "RUNNING" for group in runs.values() for run in group)
