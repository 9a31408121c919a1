"""Kill a run with SIGKILL mid-way, rerun it, and find every stage exactly once."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_SPEC, write
from tests.e2e.test_cli import BAYESFLOW, bayesflow, client
from tests.waiting import HANG_SECONDS

pytestmark = pytest.mark.e2e


# The tiny spec's SGHMC, and one long enough (each fit ~0.5 s) that a signal sent once
# three stages have finished lands while the run is still going, however fast the engines.
FAST_SGHMC = "lr: 0.01\n    epochs: 3\n    chains: 2"
SLOW_SGHMC = "lr: 0.01\n    epochs: 300\n    chains: 2"


def wait_for_finished_stages(process: subprocess.Popen, cache: Path, count: int) -> None:
    """Wait until ``count`` stages of ``process`` have finished in ``cache`` (their
    outputs.json written): progress, not seconds, says when to send the signal. Fails if
    the run ends first, or makes no progress for HANG_SECONDS."""
    deadline = time.monotonic() + HANG_SECONDS  # a hang guard, not a statement about speed
    while len(list(cache.glob("*/outputs.json"))) < count:
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before {count} stages finished"
        assert time.monotonic() < deadline, f"fewer than {count} stages finished in {HANG_SECONDS} s: hung?"
        time.sleep(0.05)


def test_sigkill_then_rerun_completes_without_duplicates(tmp_path: Path) -> None:
    """SIGKILL loses only the stage in flight; the rerun reuses the rest and ends stale runs."""
    text = TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [0.03, 0.1, 0.3, 1.0]")
    text = text.replace("evaluate:", "report: {enabled: false}\nevaluate:")
    write(tmp_path, text.replace(FAST_SGHMC, SLOW_SGHMC))
    process = subprocess.Popen([*BAYESFLOW, "run", "spec.yaml"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cache = tmp_path / ".bayesflow" / "cache"
    wait_for_finished_stages(process, cache, 3)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert 3 <= len(list(cache.glob("*/outputs.json"))) < 18, "the kill came too late to test resuming"

    result = bayesflow(tmp_path, "run", "spec.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " cached" in result.stdout
    mlflow = client(tmp_path)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    finished: dict[str, int] = {}
    computed: dict[str, str] = {}  # run id -> stage, of the runs that computed a fit
    pointers: list[tuple[str, str]] = []  # (stage, run it points to), of the rerun's reused fits
    for run in runs:
        assert run.info.status != "RUNNING", "a run of the killed process was left running"
        if run.data.tags.get("bayesflow.role") == "fit" and run.info.status == "FINISHED":
            stage = run.data.tags["bayesflow.stage"]
            source = run.data.tags.get("bayesflow.computed_by")
            if source is None:  # a run that computed its fit: exactly one per stage
                finished[stage] = finished.get(stage, 0) + 1
                computed[run.info.run_id] = stage
            else:  # the rerun's child for a fit the killed run had finished
                pointers.append((stage, source))
    assert len(finished) == 1 + 4 + 4 and set(finished.values()) == {1}
    assert all(computed.get(source) == stage for stage, source in pointers), pointers
    assert any(run.info.status == "KILLED" for run in runs)


def test_ctrl_c_marks_runs_killed_and_exits_130(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) ends the run cleanly: exit 130, no run left RUNNING, no staging left."""
    text = TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [0.03, 0.1, 0.3, 1.0]")
    text = text.replace("evaluate:", "report: {enabled: false}\nevaluate:")
    write(tmp_path, text.replace(FAST_SGHMC, SLOW_SGHMC))
    # A test worker may run with SIGINT ignored, which a child inherits (Python then installs
    # no KeyboardInterrupt handler); a handled signal is reset to the default at exec, so the
    # run starts as it would from a terminal.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen([*BAYESFLOW, "run", "spec.yaml"], cwd=tmp_path,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    cache = tmp_path / ".bayesflow" / "cache"
    wait_for_finished_stages(process, cache, 3)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not [p for p in cache.iterdir() if p.name.startswith(".staging")]
    mlflow = client(tmp_path)
    runs = mlflow.search_runs([mlflow.get_experiment_by_name("tiny").experiment_id])
    assert all(run.info.status != "RUNNING" for run in runs)
    parent = [r for r in runs if r.data.tags.get("bayesflow.role") == "parent"]
    assert [r.info.status for r in parent] == ["KILLED"]
