"""Where stages are computed: this process, local worker processes, or Ray tasks.

The Ray executor lives in :mod:`bayesflow.dag.cluster`: its tasks get their inputs as
values and send their outputs back, so its nodes need no folder shared with this one.

Every executor implements :class:`Executor`, modelled on
:class:`concurrent.futures.Executor`: ``submit(stage, inputs, staging)`` computes one
stage into its staging folder and returns a future of the stage's small values. The
scheduler (:mod:`bayesflow.dag.scheduler`) is the same loop whichever executor it is
given; it alone commits outputs to the cache and calls the hooks, so N workers never
write to the MLflow SQLite store at once (SQLite does not tolerate concurrent writers
well), and no metric or run is lost.

A stage that is not cacheable is only sent to an executor that runs stages in this process
(``accepts_uncacheable``); every kind the planner makes today is cacheable, plots and the
report included (they wait for every cell they read, as inputs).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from bayesflow.dag.cache import Entry
from bayesflow.dag.plan import Stage

__all__ = [
    "Executor",
    "InlineExecutor",
    "ProcessExecutor",
    "RunStage",
    "make_executor",
]

RunStage = Callable[[Stage, dict[str, Entry], Path], dict[str, Any]]
"""Computes one stage into a staging folder and returns its small (JSON) values."""

_RUNNER: dict[str, Any] = {}


@runtime_checkable
class Executor(Protocol):
    """Somewhere to compute stages, ``workers`` of them at once.

    Attributes:
        workers: how many stages it computes at once; the scheduler submits no more.
        accepts_uncacheable: whether it computes stages in this process, so that stages
            which are not cacheable may be sent to it.
    """

    workers: int
    accepts_uncacheable: bool

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        """Start computing ``stage`` from ``inputs`` into ``staging``.

        Returns:
            A future of the stage's values; a failed stage's future holds its exception.
        """
        ...

    def shutdown(self, cancel: bool = False) -> None:
        """Release the workers; with ``cancel``, drop queued stages and do not wait."""
        ...


class InlineExecutor:
    """Computes each stage synchronously in this process when it is submitted.

    Its futures are already done when :meth:`submit` returns, so the scheduler runs the
    plan one stage at a time, in plan order. A ``KeyboardInterrupt`` inside a stage is
    not a stage failure: it propagates out of :meth:`submit`.
    """

    workers = 1
    accepts_uncacheable = True

    def __init__(self, run_stage: RunStage) -> None:
        """Keep ``run_stage``, the function that computes one stage."""
        self.run_stage = run_stage

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        """Compute ``stage`` now; return a completed future of its values or its error."""
        future: Future[dict[str, Any]] = Future()
        future.set_running_or_notify_cancel()
        try:
            values = self.run_stage(stage, inputs, staging)
        except Exception as error:  # a failed stage is the future's exception  # noqa: BLE001
            future.set_exception(error)
        else:
            future.set_result(values)
        return future

    def shutdown(self, cancel: bool = False) -> None:
        """Nothing to release."""


def _initialise_worker(run_stage: RunStage, counter: Any) -> None:
    """Keep the runner in the worker and pin the worker to one GPU when there are several."""
    _RUNNER["run_stage"] = run_stage
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    os.environ["BAYESFLOW_WORKER_INDEX"] = str(index)
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 1:
            torch.cuda.set_device(index % torch.cuda.device_count())
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def _run_in_worker(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
    """Compute one stage with the runner this worker was started with."""
    return _RUNNER["run_stage"](stage, inputs, staging)


class ProcessExecutor:
    """``workers`` local processes, spawned so that each has its own torch runtime.

    Each worker is numbered (``BAYESFLOW_WORKER_INDEX``) and, on a machine with several
    GPUs, pinned to GPU ``index % device_count``.
    """

    accepts_uncacheable = False

    def __init__(self, run_stage: RunStage, workers: int) -> None:
        """Start a pool of ``workers`` spawned processes that run ``run_stage`` (picklable)."""
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.workers = workers
        self.pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context,
            initializer=_initialise_worker, initargs=(run_stage, context.Value("i", 0)),
        )

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        """Queue ``stage`` on the pool."""
        return self.pool.submit(_run_in_worker, stage, inputs, staging)

    def shutdown(self, cancel: bool = False) -> None:
        """Stop the pool: wait for running stages, or with ``cancel`` (an interrupt, a
        stop signal) drop queued ones and kill the workers, whose stages' staging the
        scheduler discards: the driver's exit would otherwise wait for them to finish."""
        workers = list((getattr(self.pool, "_processes", None) or {}).values()) if cancel else []
        for process in workers:
            process.kill()
        for process in workers:
            process.join(timeout=10)
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


def make_executor(execution: Any, run_stage: RunStage) -> Executor:
    """The executor a spec's ``execution`` section asks for.

    Args:
        execution: an :class:`~bayesflow.spec.settings.ExecutionSpec` (or anything with its
            ``executor``, ``workers``, ``address`` and ``resources`` attributes).
        run_stage: computes one stage; it must be picklable for processes and Ray.

    Returns:
        :class:`RayExecutor` for ``executor: ray``; :class:`ProcessExecutor` for
        ``executor: local`` with more than one worker; else :class:`InlineExecutor`.

    Raises:
        SpecError: an unknown ``executor``.
    """
    kind = getattr(execution, "executor", "local")
    workers = int(getattr(execution, "workers", 1) or 1)
    if kind == "ray":
        from bayesflow.dag.cluster import RayExecutor

        return RayExecutor(
            run_stage, getattr(execution, "address", None),
            getattr(execution, "resources", None), workers,
        )
    if kind != "local":
        from bayesflow.errors import SpecError

        raise SpecError(f"execution.executor: unknown executor {kind!r}; use local or ray")
    if workers > 1:
        return ProcessExecutor(run_stage, workers)
    return InlineExecutor(run_stage)
