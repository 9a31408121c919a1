"""BackgroundHook: the hook's calls on a worker thread, in order, errors raised after."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bayesflow.tracking.background import BackgroundHook


class Recorder:
    """A hook that records its calls and the thread that made them; may fail or stall."""

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
    assert not hook._thread.is_alive()


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
    assert not hook._thread.is_alive()


def test_an_error_surfaces_at_close() -> None:
    hook = BackgroundHook(lambda: Recorder(fail_on="last"))
    hook.before_stage("last")
    with pytest.raises(OSError, match="failed on last"):
        hook.close()
    assert not hook._thread.is_alive()


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
    assert hook.hook is None
