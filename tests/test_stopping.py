"""bayesflow.stopping: SIGTERM and SIGHUP raise Stopped once, a second one is noted, a
deferred block holds the signal until it ends, and the handlers are put back."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from bayesflow.stopping import (
    STOP_SIGNALS,
    Stopped,
    deferred,
    exit_code_of,
    restore_after,
    stop_on_signals,
)


@pytest.fixture(autouse=True)
def default_stop_signals() -> Iterator[None]:
    """Start each test from the default SIGTERM and SIGHUP handlers, as a terminal gives
    them: a suite started under `nohup` (or by a runner that ignores SIGHUP) inherits SIGHUP
    ignored, which stop_on_signals rightly leaves alone, and these tests would then fail."""
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    for number in previous:
        signal.signal(number, signal.SIG_DFL)
    yield
    for number, handler in previous.items():
        signal.signal(number, handler)


def test_stopped_is_an_interrupt_with_the_shells_exit_code() -> None:
    stopped = Stopped(signal.SIGTERM)
    assert isinstance(stopped, KeyboardInterrupt)
    assert (stopped.name, stopped.exit_code, str(stopped)) == ("SIGTERM", 143, "stopped by SIGTERM")
    assert exit_code_of(stopped) == 143 and exit_code_of(Stopped(signal.SIGHUP)) == 129
    assert exit_code_of(KeyboardInterrupt()) == 130


def test_sigterm_raises_stopped_once_and_a_second_is_noted(capfd: pytest.CaptureFixture[str]) -> None:
    with stop_on_signals():
        with pytest.raises(Stopped) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler's exception at once
        assert raised.value.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # during the cleanup: ignored
        os.kill(os.getpid(), signal.SIGHUP)
    assert capfd.readouterr().err.count("already stopping") == 1
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


def test_a_deferred_block_raises_the_signal_when_it_ends() -> None:
    finished = []
    with stop_on_signals(), pytest.raises(Stopped, match="SIGHUP"), deferred():
        os.kill(os.getpid(), signal.SIGHUP)
        with deferred():  # nested: still held
            finished.append("inner")
        finished.append("outer")
    assert finished == ["inner", "outer"]


def test_someone_elses_handler_is_left_alone() -> None:
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: calls.append(number))
    try:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_restore_after_puts_back_a_handler_a_library_replaced() -> None:
    with stop_on_signals():
        mine = signal.getsignal(signal.SIGTERM)
        restore_after(signal.signal, signal.SIGTERM, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) is mine
