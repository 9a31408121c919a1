"""A hook whose calls run on a worker thread, in order, while the stages go on.

The tracking hook (:class:`~bayesflow.tracking.hook.TrackingHook`) is a sink: nothing it
writes is read back to compute a stage. Its MLflow calls (a child run per fit with its
params, metrics, histories, posterior and pyfunc model; 43 runs and ~170 calls in the
default workflow, 25-45 ms each on a SQLite store) need not hold up the next fit, so
:class:`BackgroundHook` hands each hook call to one worker thread and returns at once.
The worker makes the calls in the order the scheduler made them, so the store sees
exactly the sequence a synchronous hook would write.

- **Errors.** The first exception a call raises is kept; later calls are skipped (a
  failed store would fail them too) and the error is raised in the scheduling thread at
  its next hook call or at :meth:`BackgroundHook.close`, which ends the run the same way
  a synchronous hook's error did (``bayesflow.api.run`` ends its runs FAILED).
- **Interrupts.** ``on_interrupt`` first waits for every queued call (each one logs a
  stage that had finished: nothing is dropped), then calls the hook's own.
- **Opening.** The hook itself is made on the worker, first (``open_hook``): the tracking
  store is opened and the parent run started there, while the first stages compute.
- **Closing.** :meth:`BackgroundHook.close` waits for the queue to empty and stops the
  worker; the wrapped hook's attributes (``runs``, ``status``) are then final.

The worker is a daemon thread: an interpreter that exits without ``close`` (a crash in
the scheduler) does not hang on it; the next run ends any run left RUNNING as stale.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundHook"]


class BackgroundHook:
    """Runs ``hook``'s ``before_stage``, ``after_stage`` and ``on_failure`` on one worker
    thread, in call order (module docstring).

    Args:
        open_hook: called first, on the worker, to make the hook (opening the store and
            starting the parent run there: :func:`bayesflow.tracking.session.open_tracking`).
            An error it raises is the first error.
        name: the worker thread's name.

    Attributes:
        hook: the hook ``open_hook`` returned; read it after :meth:`close`.
    """

    def __init__(self, open_hook: Callable[[], Any], name: str = "bayesflow-tracking") -> None:
        self.hook: Any = None
        self._open_hook = open_hook
        self._calls: queue.SimpleQueue[tuple[str, tuple[Any, ...], dict[str, Any]] | threading.Event | None] = (
            queue.SimpleQueue()
        )
        self._error: BaseException | None = None
        self._raised = False
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self.hook = self._open_hook()
        except BaseException as error:  # noqa: BLE001 - raised in the scheduling thread
            self._error = error
        while True:
            item = self._calls.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            if self._error is not None:
                continue  # a failed store fails what follows; the first error is raised
            method, args, kwargs = item
            try:
                getattr(self.hook, method)(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - raised in the scheduling thread
                self._error = error

    def _put(self, method: str, *args: Any, **kwargs: Any) -> None:
        self._raise()
        if self._closed:
            raise RuntimeError("BackgroundHook: a call after close()")
        self._calls.put((method, args, kwargs))

    def _raise(self) -> None:
        if self._error is not None and not self._raised:
            self._raised = True
            if not self._closed:
                self._closed = True
                self._calls.put(None)
            raise self._error

    def wait(self) -> None:
        """Block until every call queued so far has run; raise the first error."""
        if not self._closed and self._thread.is_alive():
            done = threading.Event()
            self._calls.put(done)
            done.wait()
        self._raise()

    def close(self) -> None:
        """Wait for every queued call, stop the worker and raise the first error."""
        try:
            self.wait()
        finally:
            if not self._closed:
                self._closed = True
                self._calls.put(None)
            self._thread.join()

    # ------------------------------------------------------------ the Hook protocol

    def before_stage(self, stage: Any) -> None:
        self._put("before_stage", stage)

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self._put("after_stage", stage, entry, cached=cached)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self._put("on_failure", stage, error, detail)

    def on_interrupt(self, stage: Any) -> None:
        """Every finished stage is logged first, then the hook's own ``on_interrupt``."""
        try:
            self.wait()
        finally:
            if self.hook is not None:
                self.hook.on_interrupt(stage)
