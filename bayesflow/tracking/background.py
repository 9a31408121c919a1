"""A hook whose calls run on a worker, in order, while the stages go on.

The tracking hook (:class:`~bayesflow.tracking.hook.TrackingHook`) is a sink: nothing it
writes is read back to compute a stage. Its MLflow calls (a child run per fit with its
params, metrics, histories, posterior and pyfunc model; 43 runs and ~260 calls in the
default workflow, 10-80 ms each on a SQLite store) need not hold up the next fit, so
:class:`BackgroundHook` hands each hook call to one worker and returns at once. The worker
makes the calls in the order the scheduler made them, so the store sees exactly the
sequence a synchronous hook would write.

- **Where.** ``process=True`` (``bayesflow run`` with an MLflow store): a child process
  (``python -m bayesflow.tracking.worker``, over a socket pair; :mod:`bayesflow.tracking.worker`
  holds the worker's loop and process), which imports mlflow
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

import pickle
import queue
import threading
from collections.abc import Callable
from typing import Any

from bayesflow.stopping import deferred
from bayesflow.tracking.worker import (
    Child,
    Message,
    discard_prestarted,
    portable,
    prestart,
    prestarted,
    serve,
    spawn,
    take_prestarted,
)

# prestart and its two companions are the worker module's, named here too for the callers
# that make a BackgroundHook.
__all__ = ["BackgroundHook", "discard_prestarted", "prestart", "prestarted"]
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
            worker, connection = take_prestarted() or spawn()
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

            how = self._worker.ended() if isinstance(self._worker, Child) else "ended"
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
