"""The tracking worker: the loop that makes a hook's calls in order (a thread's or a
process's), and the worker process itself: started (or prestarted, before the data load),
its entry point (``python -m bayesflow.tracking.worker FD``) and how it ended.
:class:`~bayesflow.tracking.background.BackgroundHook` drives it; see that module for
where the worker runs, its errors, interrupts and signals.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing.connection
import os
import pickle
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "Child", "Message", "discard_prestarted", "portable", "prestart", "prestarted", "serve",
    "spawn", "take_prestarted",
]

Message = tuple[str, Any]


def portable(error: BaseException) -> BaseException:
    """``error`` if it pickles (and unpickles), else a TrackingError with its message."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure to round-trip
        from bayesflow.errors import TrackingError
        from bayesflow.stages.context import describe_error

        return TrackingError(f"the tracking worker failed: {describe_error(error)}")
    return error


def serve(open_hook: Callable[[], Any], receive: Callable[[], Message | None],
          send: Callable[[Message], None], in_process: bool = False) -> None:
    """The worker's loop (a thread's or a process's): open the hook, then run messages.

    ``("call", (method, args, kwargs))`` calls a hook method; ``("run", (function, args,
    stop))`` replies ``("done", function(hook, *args))`` (``function`` None: nothing to
    run) and returns when ``stop``. The first error is sent as ``("error", error)`` once.
    """
    hook, failed = None, False

    def fail(error: BaseException) -> None:
        nonlocal failed
        failed = True
        send(("error", portable(error) if in_process else error))

    try:
        hook = open_hook()
    except BaseException as error:  # noqa: BLE001 - raised in the scheduling thread
        fail(error)
    while True:
        message = receive()
        if message is None:  # the scheduling process is gone
            return
        kind, body = message
        if kind == "call" and not failed:
            method, args, kwargs = body
            try:
                getattr(hook, method)(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001
                fail(error)
        elif kind == "run":
            function, args, stop = body
            result = None
            if function is not None and not failed:
                try:
                    result = function(hook, *args)
                except BaseException as error:  # noqa: BLE001
                    fail(error)
            send(("done", result))
            if stop:
                return



# A worker started by prestart(), its connection, and the folder it was started in.
_prestarted: tuple[Child, multiprocessing.connection.Connection, str] | None = None


def prestart() -> None:
    """Start a worker process now, for the next :class:`BackgroundHook` made with
    ``process=True`` in this folder to take: it imports mlflow (~2.5 s, the largest import
    of a no-op rerun) on another core while this process loads the data and plans. Does
    nothing if one is waiting already. Unused, it ends at :func:`discard_prestarted` or
    when this process does (its pipe closes)."""
    global _prestarted
    if _prestarted is None:
        _prestarted = (*spawn(), os.getcwd())


def prestarted() -> bool:
    """Whether a worker process started by :func:`prestart` in this folder is waiting."""
    return _prestarted is not None and _prestarted[0].is_alive() and _prestarted[2] == os.getcwd()


def discard_prestarted() -> None:
    """End a prestarted worker no hook took (the run failed before it began)."""
    global _prestarted
    taken, _prestarted = _prestarted, None
    if taken is not None:
        taken[1].close()  # it reads the end of its pipe and exits


def take_prestarted() -> tuple[Child, multiprocessing.connection.Connection] | None:
    """The prestarted worker, if it lives and was started in this folder (relative paths,
    MLflow's default artifact folder among them, are the worker's own)."""
    if not prestarted():
        discard_prestarted()
        return None
    global _prestarted
    assert _prestarted is not None
    worker, connection, _ = _prestarted
    _prestarted = None
    return worker, connection


def spawn() -> tuple[Child, multiprocessing.connection.Connection]:
    """A worker process and the connection to it, ``sys.path`` sent (it imports meanwhile)."""
    ours, theirs = socket.socketpair()
    with theirs:
        # Its own session: a signal sent to the run's process group (Ctrl-C at a
        # terminal, `timeout`) is not for it (it also ignores them: _serve_child).
        worker = Child(subprocess.Popen(
            [sys.executable, "-m", "bayesflow.tracking.worker", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True,
        ))
    connection = multiprocessing.connection.Connection(ours.detach())
    with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker is found at the first call
        connection.send(list(sys.path))
    return worker, connection


# What a worker imports while it waits for its hook: the MLflow client and SQL store.
WARM_MODULES = ("bayesflow.tracking.session", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store")


class Child:
    """The worker process, with the few methods of a thread the hook uses."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid

    def join(self) -> None:
        self.process.wait()

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()

    def ended(self, timeout: float = 5.0) -> str:
        """How the process ended, e.g. ``(pid 12) was killed by SIGKILL``, for a message."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:  # its pipe closed, the process lingers
            return f"(pid {self.pid}) closed its pipe"
        if code < 0:
            try:
                return f"(pid {self.pid}) was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"(pid {self.pid}) was killed by signal {-code}"
        return f"(pid {self.pid}) exited with code {code}"


def _serve_child(descriptor: int) -> None:
    """The worker process's entry (``python -m bayesflow.tracking.worker FD``): the
    first message is ``sys.path`` as the scheduling process has it, the second the hook's
    opener; then :func:`serve` runs over the socket. A subprocess, not
    ``multiprocessing``'s spawn, which re-runs the user's ``__main__`` in the child (a
    script calling ``bayesflow.run`` at its top level would run again there)."""
    # Ctrl-C, and SIGTERM or SIGHUP sent to the whole process group (timeout, systemd,
    # Slurm), are the scheduling process's to handle: it waits for every queued call to
    # be made, then stops this one; if it dies instead, the pipe closes and this exits.
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    connection = multiprocessing.connection.Connection(descriptor)
    try:
        sys.path[:] = connection.recv()
    except (EOFError, OSError):
        return

    for module in WARM_MODULES:  # while the scheduling process loads data and plans
        with contextlib.suppress(Exception):  # the hook's own import says what is wrong
            importlib.import_module(module)

    def send(message: Message) -> None:
        with contextlib.suppress(OSError):  # the scheduling process is gone
            connection.send(message)

    def receive() -> Message | None:
        try:
            kind, stop, raw = connection.recv()
        except (EOFError, OSError):
            return None
        try:
            return kind, pickle.loads(raw)
        except Exception as error:  # noqa: BLE001 - e.g. a function this process cannot import
            send(("error", portable(error)))
            return ("run", (None, (), stop)) if kind == "run" else ("skip", None)

    serve(lambda: connection.recv()(), receive, send, in_process=True)
    # Every call is made and answered: leave without the interpreter's teardown, which
    # with mlflow and SQLAlchemy loaded took ~1.2 s that the run waited for (measured).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _serve_child(int(sys.argv[1]))
