"""BackgroundHook: the hook's calls on a worker (thread or process), in order, errors after."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from bayesflow.errors import TrackingError
from bayesflow.tracking.background import BackgroundHook


class Recorder:
    """A hook that records its calls and the thread that made them; may fail or wait."""

    def __init__(self, fail_on: str | None = None, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[str] = set()
        self.fail_on, self.gate = fail_on, gate
        self.interrupted: list[Any] = []

    def _record(self, method: str, stage: Any) -> None:
        if self.gate is not None:
            self.gate.wait()
        self.threads.add(threading.current_thread().name)
        if stage == self.fail_on:
            raise OSError(f"the store failed on {stage}")
        self.calls.append((method, stage))

    def before_stage(self, stage: Any) -> None:
        self._record("before", stage)

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self._record("after", (stage, entry, cached))

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self._record("failure", (stage, str(error), detail))

    def on_interrupt(self, stage: Any) -> None:
        self.interrupted.append((stage, list(self.calls)))


class FileRecorder:
    """A hook for a worker process: appends each call, with the process id, to a file."""

    def __init__(self, path: str, fail_on: str | None = None) -> None:
        self.path, self.fail_on = path, fail_on

    def _record(self, *call: Any) -> None:
        if call[1] == self.fail_on:
            raise UnpicklableError(f"the store failed on {call[1]}")
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps([os.getpid(), *call]) + "\n")

    def before_stage(self, stage: Any) -> None:
        self._record("before", stage)

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self._record("after", stage, entry, cached)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self._record("failure", stage, f"{type(error).__name__}: {error}", detail)

    def on_interrupt(self, stage: Any) -> None:
        self._record("interrupt", stage)


class UnpicklableError(Exception):
    """An error whose constructor takes two arguments: it does not unpickle."""

    def __init__(self, message: str, extra: object = None) -> None:
        super().__init__(message)
        self.lock = threading.Lock()  # and a lock does not pickle


def summary(hook: FileRecorder, prefix: str) -> str:
    return f"{prefix}: {Path(hook.path).read_text().count(chr(10))} calls"


def test_calls_run_on_the_worker_in_order_and_close_waits_for_them() -> None:
    gate = threading.Event()
    recorder = Recorder(gate=gate)
    hook = BackgroundHook(lambda: recorder)
    for index in range(20):
        hook.before_stage(f"s{index}")
        hook.after_stage(f"s{index}", f"e{index}", cached=index % 2 == 0)
    hook.on_failure("bad", ValueError("boom"), "trace")
    # Every call was queued while the worker was held at its first: none waited for it.
    assert recorder.calls == []
    gate.set()
    hook.close()
    expected = [
        call for index in range(20)
        for call in (("before", f"s{index}"), ("after", (f"s{index}", f"e{index}", index % 2 == 0)))
    ] + [("failure", ("bad", "boom", "trace"))]
    assert recorder.calls == expected
    assert recorder.threads == {"bayesflow-tracking"}
    assert not hook._worker.is_alive()


def test_the_first_error_is_raised_at_the_next_call_and_later_calls_are_skipped() -> None:
    recorder = Recorder(fail_on="s1")
    hook = BackgroundHook(lambda: recorder)
    hook.before_stage("s0")
    hook.before_stage("s1")
    hook.before_stage("s2")  # queued before the worker met the error, then skipped
    with pytest.raises(OSError, match="the store failed on s1"):
        hook.wait()
    assert recorder.calls == [("before", "s0")]
    with pytest.raises(RuntimeError, match="after close"):
        hook.before_stage("s3")
    hook.close()  # the error was raised once; closing again is quiet
    assert recorder.calls == [("before", "s0")]
    assert not hook._worker.is_alive()


def test_an_error_surfaces_at_close_and_finish_runs_after_every_call() -> None:
    hook = BackgroundHook(lambda: Recorder(fail_on="last"))
    hook.before_stage("last")
    with pytest.raises(OSError, match="failed on last"):
        hook.close()
    assert not hook._worker.is_alive()

    recorder = Recorder()
    hook = BackgroundHook(lambda: recorder)
    hook.after_stage("s0", None, cached=True)
    assert hook.finish(lambda inner, suffix: [*inner.calls, suffix], "end") == [
        ("after", ("s0", None, True)), "end"
    ]
    assert not hook._worker.is_alive()


def test_an_interrupt_logs_every_finished_stage_first() -> None:
    gate = threading.Event()
    recorder = Recorder(gate=gate)
    hook = BackgroundHook(lambda: recorder)
    for index in range(5):
        hook.after_stage(f"s{index}", None, cached=False)
    assert recorder.calls == []
    gate.set()
    hook.on_interrupt("s5")
    assert recorder.interrupted == [
        ("s5", [("after", (f"s{index}", None, False)) for index in range(5)])
    ]
    hook.close()


def test_a_hook_that_cannot_be_opened_fails_the_next_call() -> None:
    def unopenable() -> Recorder:
        raise OSError("the store is read-only")

    hook = BackgroundHook(unopenable)
    with pytest.raises(OSError, match="read-only"):
        hook.wait()
    hook.on_interrupt(None)  # nothing to tell: no hook was made
    hook.close()


@pytest.mark.slow
def test_a_worker_process_makes_the_calls_in_order(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    hook = BackgroundHook(functools.partial(FileRecorder, str(path)), process=True)
    for index in range(10):
        hook.before_stage(f"s{index}")
        hook.after_stage(f"s{index}", {"entry": index}, cached=False)
    hook.on_failure("bad", UnpicklableError("no pickle"), "trace")
    hook.on_interrupt("s10")
    assert hook.finish(summary, "done") == "done: 22 calls"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {line[0] for line in lines} == {hook._worker.pid} != {os.getpid()}
    assert [line[1:] for line in lines] == [
        call for index in range(10)
        for call in (["before", f"s{index}"], ["after", f"s{index}", {"entry": index}, False])
    ] + [
        ["failure", "bad", "TrackingError: the tracking worker failed: UnpicklableError: no pickle", "trace"],
        ["interrupt", "s10"],
    ]
    assert hook._worker.exitcode == 0


@pytest.mark.slow
def test_a_worker_process_error_comes_back_as_a_tracking_error(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    hook = BackgroundHook(functools.partial(FileRecorder, str(path), fail_on="s1"), process=True)
    hook.before_stage("s0")
    hook.before_stage("s1")
    hook.before_stage("s2")
    with pytest.raises(TrackingError, match="UnpicklableError: the store failed on s1"):
        hook.wait()
    hook.close()
    assert [json.loads(line)[1:] for line in path.read_text().splitlines()] == [["before", "s0"]]
    assert hook._worker.exitcode == 0


@pytest.mark.slow
def test_a_worker_process_that_dies_is_an_error_not_a_hang(tmp_path: Path) -> None:
    hook = BackgroundHook(functools.partial(FileRecorder, str(tmp_path / "calls.jsonl")), process=True)
    hook.wait()
    hook._worker.kill()
    hook._worker.join()
    pid = hook._worker.pid
    with pytest.raises(TrackingError, match=rf"worker process \(pid {pid}\) was killed by SIGKILL"):
        hook.after_stage("s0", None, cached=False)
    hook.close()


@pytest.mark.slow
def test_a_worker_process_ignores_the_signals_that_stop_a_run(tmp_path: Path) -> None:
    """SIGTERM, SIGHUP or SIGINT sent to the worker (as to a whole process group) do not
    end it: it makes every call until it is stopped."""
    path = tmp_path / "calls.jsonl"
    hook = BackgroundHook(functools.partial(FileRecorder, str(path)), process=True)
    hook.wait()  # the worker is past its start
    assert os.getpgid(hook._worker.pid) == hook._worker.pid != os.getpgid(0)  # its own group
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        os.kill(hook._worker.pid, number)
    hook.before_stage("s0")
    assert hook.finish(summary, "done") == "done: 1 calls"
    assert hook._worker.exitcode == 0


@pytest.mark.slow
def test_an_interrupt_with_a_dead_worker_keeps_the_interrupt(tmp_path: Path) -> None:
    """on_interrupt does not raise the worker's death: the interrupt ends the run."""
    hook = BackgroundHook(functools.partial(FileRecorder, str(tmp_path / "calls.jsonl")), process=True)
    hook.wait()
    hook._worker.kill()
    hook._worker.join()
    hook.on_interrupt(None)
    with pytest.raises(TrackingError, match="killed by SIGKILL"):
        hook.close()


@pytest.mark.slow
def test_a_message_the_worker_process_cannot_read_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function the worker cannot import (defined in the test's own namespace, not a
    module the child can import): the error comes back, the run does not wait forever."""
    hook = BackgroundHook(functools.partial(FileRecorder, str(tmp_path / "calls.jsonl")), process=True)
    only_here = types.ModuleType("only_in_this_process")
    exec("def unreachable(hook):\n    return 1\n", only_here.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, only_here.__name__, only_here)
    with pytest.raises(ModuleNotFoundError, match="only_in_this_process"):
        hook.finish(only_here.unreachable)
    assert hook._worker.exitcode == 0


@pytest.mark.slow
def test_a_prestarted_worker_process_is_taken_by_the_next_hook(tmp_path: Path) -> None:
    """prestart() starts the process early; the next process hook uses it, not another."""
    from bayesflow.tracking import background, worker

    background.prestart()
    assert background.prestarted()
    pid = worker._prestarted[0].pid  # type: ignore[index]
    assert worker._prestarted[2] == os.getcwd()  # type: ignore[index]
    path = tmp_path / "calls.jsonl"
    hook = BackgroundHook(functools.partial(FileRecorder, str(path)), process=True)
    assert not background.prestarted() and hook._worker.pid == pid
    hook.before_stage("s0")
    assert hook.finish(summary, "done") == "done: 1 calls"
    assert [json.loads(line)[0] for line in path.read_text().splitlines()] == [pid]


@pytest.mark.slow
def test_a_prestarted_worker_from_another_folder_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its relative paths would be another folder's: a fresh worker is started instead,
    and the prestarted one ends."""
    from bayesflow.tracking import background, worker

    background.prestart()
    stale = worker._prestarted[0]  # type: ignore[index]
    monkeypatch.chdir(tmp_path)
    assert not background.prestarted()
    hook = BackgroundHook(functools.partial(FileRecorder, str(tmp_path / "calls.jsonl")), process=True)
    assert hook._worker.pid != stale.pid
    hook.before_stage("s0")
    assert hook.finish(summary, "done") == "done: 1 calls"
    stale.join()  # its pipe was closed: it ends
    assert stale.exitcode == 0
