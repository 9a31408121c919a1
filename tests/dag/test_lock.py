"""One run at a time per cache folder: waiting, refusing, recovering after SIGKILL."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bayesflow.dag import lock as lock_module
from bayesflow.dag.cache import Cache, _host_tag
from bayesflow.dag.lock import (
    LOCK_NAME,
    POLL_SECONDS,
    TIMEOUT_VARIABLE,
    Holder,
    read_holder,
    wait_from_environment,
)
from bayesflow.errors import CacheLockError
from tests.data.tables import TABLE_SPEC, good_rows, write_table
from tests.waiting import HANG_SECONDS

# Holds the lock of the cache folder argv[1] until the file argv[2] exists, and says
# "releasing" just before it lets go.
HOLDER = """
import sys, time
from pathlib import Path
from bayesflow.dag.cache import Cache, _host_tag
with Cache(sys.argv[1]).lock():
    print("held", flush=True)
    while not Path(sys.argv[2]).exists():
        time.sleep(0.02)
    print("releasing", flush=True)
"""

BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]
BUSY_FIX = (
    "let it finish and run again (finished stages are reused), give this run its own "
    f"`execution.cache_dir`, or set {TIMEOUT_VARIABLE} (seconds to wait; unset waits until it finishes)"
)


def hold(root: Path, flag: Path) -> tuple[subprocess.Popen[str], Holder]:
    """Start a process that holds ``root``'s lock until ``flag`` exists; return it and
    the holder record it wrote."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(flag)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    holder = read_holder(root / LOCK_NAME)
    assert holder is not None and holder.pid == process.pid
    return process, holder


class Clock:
    """Stands in for the lock module's ``time``: ``sleep`` advances ``monotonic`` by the
    seconds asked instead of waiting, and every sleep is recorded. A test then says how
    the lock waited (how often it tried, for how long in all) without reading a clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def strftime(self, pattern: str) -> str:
        return time.strftime(pattern)


@pytest.mark.slow
def test_a_second_process_is_refused_without_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wait=False raises at the first busy try (no pause, no waiting line), naming the
    holder's pid, command, start and the fix."""
    root, flag = tmp_path / "cache", tmp_path / "done"
    process, holder = hold(root, flag)
    clock, lines = Clock(), []
    monkeypatch.setattr(lock_module, "time", clock)
    try:
        with pytest.raises(CacheLockError) as caught, Cache(root).lock(wait=False, notify=lines.append):
            pass
        assert clock.sleeps == [] and lines == []
        assert str(caught.value) == (
            f"cache {root}: in use by run PID {process.pid} (python -c ... {root} {flag}) started at "
            f"{holder.started}; {BUSY_FIX}"
        )
        assert caught.value.exit_code == 1
    finally:
        flag.touch()
        process.wait(timeout=HANG_SECONDS)


@pytest.mark.slow
def test_a_second_process_waits_then_proceeds(tmp_path: Path) -> None:
    """With wait (the default) the lock is taken once the holder ends; the waiting line is
    said once, however long the wait.

    Ordering, not durations, shows that it waited: the holder is told to let go only from
    the waiting line's callback, so the lock was busy when the line came; and when ours is
    taken, the holder's "releasing" (said before it lets go) is already there to read."""
    root, flag = tmp_path / "cache", tmp_path / "done"
    process, holder = hold(root, flag)
    lines: list[str] = []
    events: list[str] = []

    def waiting(line: str) -> None:
        lines.append(line)
        events.append("told to wait")
        flag.touch()  # only now may the holder let go

    with Cache(root).lock(notify=waiting):
        events.append("acquired")
        assert read_holder(root / LOCK_NAME).pid == os.getpid()  # type: ignore[union-attr]
        assert process.stdout is not None
        assert select.select([process.stdout], [], [], 0)[0], "the lock was taken before the holder let go"
        assert process.stdout.readline() == "releasing\n"
    assert events == ["told to wait", "acquired"]
    assert lines == [f"waiting for {holder.describe()} (cache {root}) to finish; Ctrl-C to stop"]
    assert holder.describe() == f"run PID {process.pid} (python -c ... {root} {flag}) started at {holder.started}"
    process.wait(timeout=HANG_SECONDS)


@pytest.mark.slow
def test_waiting_stops_at_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout raises once it has passed, saying how long it waited and for whom: the
    lock polls in pauses of at most POLL_SECONDS that add up to the timeout, not past it,
    and tells the waiting line once (a stand-in clock: no real waiting)."""
    root, flag = tmp_path / "cache", tmp_path / "done"
    process, holder = hold(root, flag)
    clock, lines = Clock(), []
    monkeypatch.setattr(lock_module, "time", clock)
    try:
        with pytest.raises(CacheLockError) as caught, Cache(root).lock(timeout=1.0, notify=lines.append):
            pass
        assert len(clock.sleeps) >= 1.0 / POLL_SECONDS and max(clock.sleeps) <= POLL_SECONDS
        assert sum(clock.sleeps) == pytest.approx(1.0) and sum(clock.sleeps[:-1]) < 1.0
        assert lines == [f"waiting for {holder.describe()} (cache {root}) to finish; Ctrl-C to stop"]
        assert str(caught.value) == f"cache {root}: waited 1 s for {holder.describe()}; {BUSY_FIX}"
    finally:
        flag.touch()
        process.wait(timeout=HANG_SECONDS)


@pytest.mark.slow
def test_a_killed_holder_does_not_block_the_next_run(tmp_path: Path) -> None:
    """SIGKILL releases the lock with the process; its stale record does not matter."""
    root, flag = tmp_path / "cache", tmp_path / "never"
    process, _ = hold(root, flag)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=HANG_SECONDS)
    assert read_holder(root / LOCK_NAME) is not None  # the dead holder's record is still there
    with Cache(root).lock(wait=False):
        assert read_holder(root / LOCK_NAME).pid == os.getpid()  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_lock_is_reentrant_in_its_thread_and_released_after(tmp_path: Path) -> None:
    """Taking the lock again in the holding thread works; after the outer release another
    process gets it, and the record is cleared."""
    cache = Cache(tmp_path)
    with cache.lock(wait=False), cache.lock(wait=False):
        pass
    assert read_holder(tmp_path / LOCK_NAME) is None
    code = f"from bayesflow.dag.cache import Cache\nwith Cache({str(tmp_path)!r}).lock(wait=False): pass"
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS, check=False)
    assert probe.returncode == 0, probe.stderr


def test_holding_lock_decorator_holds_it_for_the_call(tmp_path: Path) -> None:
    """Cache.holding_lock takes the folder from the first argument, positional or named."""

    @Cache.holding_lock(lambda folder: folder)
    def work(folder: Path) -> int | None:
        holder = read_holder(folder / LOCK_NAME)
        return holder.pid if holder else None

    assert work(tmp_path) == os.getpid()
    assert work(folder=tmp_path) == os.getpid()
    assert read_holder(tmp_path / LOCK_NAME) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", (True, None)), ("0", (False, 0.0)), ("2.5", (True, 2.5))],
    ids=["unset", "zero", "seconds"],
)
def test_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple) -> None:
    """Unset waits without limit, 0 refuses at once, a number waits that long."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, value)
    assert wait_from_environment() == expected


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_timeout_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """A value that is no number of seconds names the variable and what it takes."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, value)
    with pytest.raises(CacheLockError) as caught:
        wait_from_environment()
    assert str(caught.value) == (
        f"{TIMEOUT_VARIABLE}={value!r} is not a number of seconds; set it to 0 to refuse at once "
        "when another run holds the cache, to N to wait N seconds, or unset it to wait"
    )


# ----------------------------------------------------------- through the command line


def run_command(folder: Path, **environment: str) -> subprocess.Popen[str]:
    """Start `bayesflow run spec.yaml` in ``folder``."""
    return subprocess.Popen(
        [*BAYESFLOW, "run", "spec.yaml"], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "COLUMNS": "200", **environment},
    )


@pytest.mark.e2e
def test_two_runs_started_together_both_finish_and_compute_each_stage_once(tmp_path: Path) -> None:
    """Two `bayesflow run`s on one fresh folder: one waits for the other, saying for whom;
    both exit 0 (no race creating the MLflow store); the second reuses every stage."""
    write_table(tmp_path, good_rows(), spec=TABLE_SPEC.replace("epochs: 2", "epochs: 50"))
    processes = [run_command(tmp_path) for _ in range(2)]
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stdout + stderr
    waited = [index for index, (_, stderr) in enumerate(outputs) if "waiting for" in stderr]
    assert len(waited) == 1, outputs
    first, second = processes[1 - waited[0]], outputs[waited[0]]
    line = next(line for line in second[1].splitlines() if "waiting for" in line)
    assert line.startswith(f"waiting for run PID {first.pid} (python -m bayesflow.cli run spec.yaml) started at ")
    assert line.endswith(" (cache .bayesflow/cache) to finish; Ctrl-C to stop")
    assert second[1].count("waiting for") == 1
    summaries = sorted(line.split(" in ")[0] for stdout, _ in outputs for line in stdout.splitlines()
                       if line.startswith("stages:"))
    assert summaries == ["stages: 0 ran, 2 cached, 0 failed, 0 skipped", "stages: 2 ran, 0 cached, 0 failed, 0 skipped"]


@pytest.mark.e2e
def test_a_run_told_not_to_wait_exits_1_naming_the_holder(tmp_path: Path) -> None:
    """BAYESFLOW_LOCK_TIMEOUT=0: `bayesflow run` refuses at once with exit code 1, and the
    holder's files are untouched."""
    write_table(tmp_path, good_rows())
    root, flag = tmp_path / ".bayesflow" / "cache", tmp_path / "done"
    holder_process, holder = hold(root, flag)
    leftover = root / f".staging-{holder_process.pid}-{_host_tag()}-k-x"
    leftover.mkdir()
    try:
        process = run_command(tmp_path, **{TIMEOUT_VARIABLE: "0"})
        stdout, stderr = process.communicate(timeout=600)
    finally:
        flag.touch()
        holder_process.wait(timeout=HANG_SECONDS)
    assert process.returncode == 1, stdout + stderr
    assert stderr.endswith(f"error: cache .bayesflow/cache: in use by {holder.describe()}; {BUSY_FIX}\n")
    assert "Traceback" not in stderr and leftover.is_dir()


def test_a_cache_folder_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    """A cache_dir that is a file names the lock file and the fix (no OSError traceback)."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    with pytest.raises(CacheLockError) as caught, Cache(blocker / "inner").lock():
        pass
    assert str(caught.value) == (
        f"cache {blocker / 'inner'}: cannot create the lock file {blocker / 'inner' / LOCK_NAME} "
        "(Not a directory); check that execution.cache_dir names a folder you can write, or choose another"
    )
