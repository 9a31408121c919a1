"""A hook whose calls run on a worker, in order, while the stages go on.

The tracking hook (:class:`~bayesflow.tracking.hook.TrackingHook`) is a sink: nothing it
writes is read back to compute a stage. Its MLflow calls (a child run per fit with its
params, metrics, histories, posterior and pyfunc model; 43 runs and ~260 calls in the
default workflow, 10-80 ms each on a SQLite store) need not hold up the next fit, so
:class:`BackgroundHook` hands each hook call to one worker and returns at once. The worker
makes the calls in the order the scheduler made them, so the store sees exactly the
sequence a synchronous hook would write.

- **Where.** ``process=True`` (``bayesflow run`` with an MLflow store): a child process
  (``python -m bayesflow.tracking.background``, over a socket pair), which imports mlflow
  and writes the store on the machine's other core. A thread would
  share the interpreter: its Python (SQLAlchemy, the pyfunc model) took the GIL from the
  fits' Python between torch kernels, and the default workflow's fit and evaluate stages
  ran ~10% slower (measured). ``process=False``: a thread, for trackers that live in
  this process (the in-memory tracker of the tests, a wrapping tracker of the
  benchmarks).
- **Opening.** The hook itself is made on the worker, first (``open_hook``, which must
  pickle for a process: :func:`bayesflow.tracking.session.open_tracking` bound to its
  arguments): the store is opened and the parent run started there, while the first
  stages compute.
- **Prestart.** ``bayesflow run`` calls :func:`prestart` before it loads the data: the
  worker process starts and imports mlflow on the other core meanwhile, and the next
  process hook made in the same folder takes it (a no-op rerun of a small workflow no
  longer waits for that import after the data; docs/benchmarks.md, issue 22).
- **Errors.** The first exception the worker meets is kept and later calls are skipped
  (a failed store would fail them too); the scheduling thread raises it at its next hook
  call (as soon as the worker has reported it) or at :meth:`BackgroundHook.wait`, which
  ends the run the way a synchronous hook's error did (``bayesflow.api.run`` ends its
  runs FAILED). From a process, an error that does not pickle comes as a
  :class:`~bayesflow.errors.TrackingError` with its message.
- **Interrupts.** ``on_interrupt`` first waits for every queued call (each one logs a
  stage that had finished: nothing is dropped), then calls the hook's own. The worker
  process ignores SIGINT, SIGTERM and SIGHUP, so the Ctrl-C, or the SIGTERM of
  ``timeout``, systemd or Slurm, that reaches the whole process group does not cut its
  calls short: it ends when the scheduling process stops it or its pipe closes. A
  message to it is written whole (:func:`bayesflow.stopping.deferred`).
- **A worker that dies** (killed alone, e.g. by the out-of-memory killer) is a
  :class:`~bayesflow.errors.TrackingError` naming its pid and the signal or exit code,
  raised at the scheduling thread's next hook call or wait: never a hang.
- **Finishing.** :meth:`BackgroundHook.finish` runs one last function on the worker's hook
  after every queued call (publishing the stages, ending the parent run) and stops the
  worker; :meth:`BackgroundHook.close` stops it without one. A process whose parent dies
  sees its pipe close and exits; the next run ends any run left RUNNING as stale.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing.connection
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from bayesflow.stopping import deferred

__all__ = ["BackgroundHook", "discard_prestarted", "prestart", "prestarted"]

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


class BackgroundHook:
    """Runs a hook's ``before_stage``, ``after_stage`` and ``on_failure`` on one worker,
    in call order (module docstring).

    Args:
        open_hook: called first, on the worker, to make the hook; an error it raises is
            the first error.
        process: a child process (``open_hook`` and every call's arguments must
            pickle) rather than a thread.
        name: the worker's name.
    """

    def __init__(self, open_hook: Callable[[], Any], process: bool = False,
                 name: str = "bayesflow-tracking") -> None:
        self._error: BaseException | None = None
        self._raised = False
        self._stopped = False
        self._process = process
        if process:
            worker, connection = _take_prestarted() or _spawn()
            self._worker: Any = worker

            def send(message: Message) -> None:
                # The body pickled apart, so the worker can answer a body it cannot read.
                kind, body = message
                raw = pickle.dumps(body)
                with deferred():  # a stop signal must not cut a message in two
                    connection.send((kind, kind == "run" and body[2], raw))

            self._send: Callable[[Message], None] = send
            self._poll: Callable[[float | None], Message | None] = lambda timeout: (
                connection.recv() if connection.poll(timeout) else None
            )
            try:
                connection.send(open_hook)
            except (BrokenPipeError, OSError):
                self._worker_died()
        else:
            inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
            outbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
            self._send = inbox.put

            def poll(timeout: float | None) -> Message | None:
                try:
                    return outbox.get(block=timeout != 0, timeout=timeout or None)
                except queue.Empty:
                    return None

            self._poll = poll
            self._worker = threading.Thread(
                target=serve, args=(open_hook, inbox.get, outbox.put), name=name, daemon=True
            )
            self._worker.start()

    # ------------------------------------------------------------------ internals

    def _take_error(self, message: Message) -> None:
        if message[0] == "error" and self._error is None:
            self._error = message[1]

    def _raise(self) -> None:
        if self._error is not None and not self._raised:
            self._raised = True
            self._stop()
            raise self._error

    def _stop(self) -> None:
        """Stop the worker (after what is queued) without waiting for a result."""
        if not self._stopped:
            self._stopped = True
            self._request(None, (), stop=True)
            self._worker.join()

    def _request(self, function: Callable[..., Any] | None, args: tuple[Any, ...], stop: bool) -> Any:
        """Send a ``run`` message and wait for its ``done``; errors are kept."""
        try:
            self._send(("run", (function, args, stop)))
        except (BrokenPipeError, EOFError, OSError):  # the worker is gone
            self._worker_died()
            return None
        while True:
            try:
                message = self._poll(None)
            except (EOFError, OSError):  # the worker died without replying
                self._worker_died()
                return None
            if message is None:
                continue
            if message[0] == "done":
                return message[1]
            self._take_error(message)

    def _worker_died(self) -> None:
        if self._error is None:
            from bayesflow.errors import TrackingError

            how = self._worker.ended() if isinstance(self._worker, _Child) else "ended"
            self._error = TrackingError(
                f"the tracking worker process {how} before the run's logging was done "
                "(killed alone, e.g. by the out-of-memory killer?); the run stops here. "
                "Finished stages are cached: rerun the same command to finish and log them"
            )

    def _put(self, method: str, *args: Any, **kwargs: Any) -> None:
        try:
            while (message := self._poll(0)) is not None:  # an error reported meanwhile
                self._take_error(message)
        except (EOFError, OSError):
            self._worker_died()
        self._raise()
        if self._stopped:
            raise RuntimeError("BackgroundHook: a call after close()")
        try:
            self._send(("call", (method, args, kwargs)))
        except (BrokenPipeError, OSError):  # the worker is gone
            self._worker_died()
            self._raise()

    # ------------------------------------------------------------------ control

    def wait(self) -> None:
        """Block until every call queued so far has run; raise the first error."""
        if not self._stopped:
            self._request(None, (), stop=False)
        self._raise()

    def finish(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(hook, *args)`` on the worker after every queued call, then stop the
        worker; its result (it must pickle from a process). Raises the first error."""
        if self._stopped:
            self._raise()
            raise RuntimeError("BackgroundHook: finish() after close()")
        result = self._request(function, args, stop=True)
        self._stopped = True
        self._worker.join()
        self._raise()
        return result

    def close(self) -> None:
        """Wait for every queued call, stop the worker and raise the first error."""
        try:
            self.wait()
        finally:
            self._stop()

    # ------------------------------------------------------------ the Hook protocol

    def before_stage(self, stage: Any) -> None:
        self._put("before_stage", stage)

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self._put("after_stage", stage, entry, cached=cached)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self._put("on_failure", stage, portable(error) if self._process else error, detail)

    def on_interrupt(self, stage: Any) -> None:
        """Every finished stage is logged first, then the hook's own ``on_interrupt``.
        An error met meanwhile (a worker that died too) is kept, not raised: the
        interrupt is what ends the run."""
        if not self._stopped:
            self._request(_interrupt, (stage,), stop=False)


def _interrupt(hook: Any, stage: Any) -> None:
    hook.on_interrupt(stage)


# A worker started by prestart(), its connection, and the folder it was started in.
_prestarted: tuple[_Child, multiprocessing.connection.Connection, str] | None = None


def prestart() -> None:
    """Start a worker process now, for the next :class:`BackgroundHook` made with
    ``process=True`` in this folder to take: it imports mlflow (~2.5 s, the largest import
    of a no-op rerun) on another core while this process loads the data and plans. Does
    nothing if one is waiting already. Unused, it ends at :func:`discard_prestarted` or
    when this process does (its pipe closes)."""
    global _prestarted
    if _prestarted is None:
        _prestarted = (*_spawn(), os.getcwd())


def prestarted() -> bool:
    """Whether a worker process started by :func:`prestart` in this folder is waiting."""
    return _prestarted is not None and _prestarted[0].is_alive() and _prestarted[2] == os.getcwd()


def discard_prestarted() -> None:
    """End a prestarted worker no hook took (the run failed before it began)."""
    global _prestarted
    taken, _prestarted = _prestarted, None
    if taken is not None:
        taken[1].close()  # it reads the end of its pipe and exits


def _take_prestarted() -> tuple[_Child, multiprocessing.connection.Connection] | None:
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


def _spawn() -> tuple[_Child, multiprocessing.connection.Connection]:
    """A worker process and the connection to it, ``sys.path`` sent (it imports meanwhile)."""
    ours, theirs = socket.socketpair()
    with theirs:
        # Its own session: a signal sent to the run's process group (Ctrl-C at a
        # terminal, `timeout`) is not for it (it also ignores them: _serve_child).
        worker = _Child(subprocess.Popen(
            [sys.executable, "-m", "bayesflow.tracking.background", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True,
        ))
    connection = multiprocessing.connection.Connection(ours.detach())
    with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker is found at the first call
        connection.send(list(sys.path))
    return worker, connection


# What a worker imports while it waits for its hook: the MLflow client and SQL store.
WARM_MODULES = ("bayesflow.tracking.session", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store")


class _Child:
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
    """The worker process's entry (``python -m bayesflow.tracking.background FD``): the
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
