"""Processes that die or run side by side: SIGKILL at random points then a rerun, two runs
in one folder with different cache folders, several processes creating one MLflow store.

Every cell is finished exactly once (in the cache and as one finished MLflow run), no
run is left RUNNING, and both of two concurrent runs succeed. Each test starts several
`bayesflow` processes (seconds each): marked slow.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos.helpers import SPEC, entries, finished_once, fit_runs, leftovers, workflow
from tests.waiting import HANG_SECONDS

pytestmark = pytest.mark.slow

BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]
ENVIRONMENT = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(Path(__file__).parents[2])}
# Four seeds: four fits and four evaluations, so that kills land between stages too.
FOUR_SEEDS = SPEC.replace("seeds: [0, 1]", "seeds: [0, 1, 2, 3]").replace("epochs: 2", "epochs: 30")


def start(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*BAYESFLOW, "run", "spec.yaml", *args], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENVIRONMENT)


def summary(stdout: str) -> tuple[int, int]:
    """(ran, cached) from the run's summary line."""
    found = re.search(r"stages: (\d+) ran, (\d+) cached, 0 failed, 0 skipped", stdout)
    assert found, stdout
    return int(found.group(1)), int(found.group(2))


def test_sigkill_at_random_points_then_a_rerun_finishes_every_cell_once(tmp_path: Path) -> None:
    workflow(tmp_path, FOUR_SEEDS, store=False)  # the first kill may land while the store is made
    # Three runs, each killed once the cache holds a chosen number of finished stages (0:
    # during start-up and the store's creation) and up to 50 ms more (within the next
    # stage): progress, not seconds since start, says when, so the kills land before the
    # end on an idle machine (0.3 s more let an idle one finish all 8) and after start-up
    # on a loaded one.
    chooser = random.Random(15)
    for target in sorted(chooser.sample(range(5), 3)):
        process = start(tmp_path)
        deadline = time.monotonic() + HANG_SECONDS  # a hang guard, not a statement about speed
        while len(entries(tmp_path)) < target and process.poll() is None:
            assert time.monotonic() < deadline, f"fewer than {target} stages finished: hung?"
            time.sleep(0.01)
        time.sleep(chooser.uniform(0.0, 0.05))
        process.send_signal(signal.SIGKILL)
        process.communicate()
    done_before = len(entries(tmp_path))
    assert done_before < 8, "the kills came too late to test anything"
    process = start(tmp_path)
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stdout + stderr
    ran, cached = summary(stdout)
    assert (ran, cached) == (8 - done_before, done_before)  # nothing finished was computed again
    assert len(entries(tmp_path)) == 8 and leftovers(tmp_path) == []
    assert finished_once(fit_runs(tmp_path), 4), fit_runs(tmp_path)


def test_two_runs_with_their_own_cache_folders_share_the_store(tmp_path: Path) -> None:
    """Started together in one folder, without a store yet: both make it, both finish."""
    workflow(tmp_path, store=False)
    processes = [start(tmp_path, f"execution.cache_dir=cache-{index}") for index in range(2)]
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stdout + stderr
        assert summary(stdout) == (4, 0)
    runs = fit_runs(tmp_path)
    assert len(runs) == 2 and all(statuses == ["FINISHED", "FINISHED"] for statuses in runs.values()), runs


# Makes the store of argv[1] (a SQLite URI) once the file argv[2] exists, and logs one run;
# says "ready" once it has imported mlflow, then waits for the start.
CREATOR = """
import sys, time
from pathlib import Path
import mlflow.exceptions, mlflow.tracking, sqlalchemy.exc  # the slow imports, before the start
from bayesflow.tracking.mlflow_tracker import MlflowTracker
tracker = MlflowTracker(sys.argv[1])  # lazy: the store is made on first use, below
print("ready", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.001)
tracker.end_run(tracker.start_run("race", "r", params={}, tags={}), "FINISHED")
print("ok")
"""


def test_processes_creating_one_store_at_once_all_succeed(tmp_path: Path) -> None:
    """Without the store's lock, 6 of 9 such processes failed in Alembic's migrations.

    A barrier, not a time of day, starts them together: each says "ready" once its imports
    are done, and the start file is written when all three have, however slow the imports."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    go = tmp_path / "go"
    processes = [subprocess.Popen([sys.executable, "-c", CREATOR, uri, str(go)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENVIRONMENT) for _ in range(3)]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    go.touch()
    for process in processes:
        stdout, stderr = process.communicate(timeout=HANG_SECONDS)
        assert process.returncode == 0 and stdout == "ok\n", stderr[-2000:]
    assert (tmp_path / "mlflow.db.lock").is_file()
