"""Stopping a run by a signal the way Ctrl-C stops it.

``timeout``, systemd, Slurm and Kubernetes stop a job with SIGTERM (a closed terminal
sends SIGHUP). Python's default for both is to die at once: no stage's logging is
finished, the MLflow parent run stays RUNNING and the user is told nothing. Inside
:func:`stop_on_signals` either signal raises :class:`Stopped` instead, a
:class:`KeyboardInterrupt`, so it takes Ctrl-C's path through the scheduler
(``on_interrupt``: staging discarded, queued logging finished) and ``bayesflow.api.run``
(its runs ended KILLED), and the command line exits ``128 + signal`` (143 for SIGTERM,
the shell's convention) with one line saying what finished.

A second signal while the first one's cleanup runs is noted on stderr and otherwise
ignored: the cleanup waits only for calls already queued, and a job manager that will
not wait sends SIGKILL (systemd after ``TimeoutStopSec``, Slurm after ``KillWait``),
which the next run handles (runs left RUNNING by a dead process are ended as stale).

Code that must not be cut half-way (a message half-written to the tracking worker's
pipe) runs under :func:`deferred`: a signal that arrives there is raised when it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["STOP_SIGNALS", "Stopped", "deferred", "exit_code_of", "restore_after", "stop_on_signals"]

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals that stop a run like Ctrl-C (SIGHUP is absent on Windows)."""


class Stopped(KeyboardInterrupt):
    """A run stopped by a signal (SIGTERM, SIGHUP); handled wherever Ctrl-C is.

    Attributes:
        signal_number: the signal's number.
        name: the signal's name, e.g. ``SIGTERM``.
        exit_code: ``128 + signal_number``, the shell's code for a process ended by it.
    """

    def __init__(self, signal_number: int) -> None:
        self.signal_number = int(signal_number)
        self.name = signal.Signals(signal_number).name
        self.exit_code = 128 + self.signal_number
        super().__init__(f"stopped by {self.name}")


def exit_code_of(interrupt: KeyboardInterrupt) -> int:
    """The exit code of a run ended by ``interrupt``: 128 + its signal (130 for Ctrl-C)."""
    return interrupt.exit_code if isinstance(interrupt, Stopped) else 128 + signal.SIGINT


class _State:
    """What the handler knows: whether a stop is under way, and deferral."""

    def __init__(self) -> None:
        self.stopping: int | None = None  # the signal that started the stop
        self.noted = False  # the "already stopping" line was written
        self.deferring = 0  # depth of deferred() blocks
        self.pending: int | None = None  # a signal that arrived while deferring


_state: _State | None = None


def _handle(signal_number: int, frame: Any) -> None:
    state = _state
    if state is None:  # pragma: no cover - restored before the state is dropped
        return
    if state.stopping is not None:
        if not state.noted:
            state.noted = True
            # os.write: a signal handler must not reenter a buffered stream.
            with contextlib.suppress(OSError):
                os.write(2, (
                    f"bayesflow: {signal.Signals(signal_number).name} again: already stopping, "
                    "finishing the log of the finished stages (SIGKILL stops at once)\n"
                ).encode())
        return
    if state.deferring:
        state.pending = signal_number
        return
    state.stopping = signal_number
    raise Stopped(signal_number)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Raise :class:`Stopped` on SIGTERM or SIGHUP while the block runs.

    Does nothing outside the main thread (Python runs signal handlers there only), nor
    for a signal whose handler is not the default (someone else's, or this function's
    in an enclosing block), nor when nested. The handlers are restored on exit.
    """
    global _state
    if _state is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    mine = [number for number, handler in previous.items() if handler == signal.SIG_DFL]
    if not mine:
        yield
        return
    _state = _State()
    try:
        for number in mine:
            signal.signal(number, _handle)
        yield
    finally:
        for number in mine:
            signal.signal(number, previous[number])
        _state = None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal that arrives during the block until it ends (then raise it)."""
    state = _state
    if state is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    state.deferring += 1
    try:
        yield
    finally:
        state.deferring -= 1
        if not state.deferring and state.pending is not None and state.stopping is None:
            number, state.pending = state.pending, None
            state.stopping = number
            raise Stopped(number)


def restore_after(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``function`` and put back the stop signals' handlers it replaced (``ray.init``
    installs its own SIGTERM handler, ``sys.exit``, which would skip the cleanup)."""
    if threading.current_thread() is not threading.main_thread():
        return function(*args, **kwargs)
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    try:
        return function(*args, **kwargs)
    finally:
        for number, handler in previous.items():
            if handler is not None and signal.getsignal(number) != handler:
                signal.signal(number, handler)
