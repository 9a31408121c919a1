"""Run independent stages concurrently on a backend: local processes or Ray tasks.

The main process stays the only one that touches the tracking store and the cache
index: workers compute a stage into a staging folder and return its small values; the
main process commits the folder and calls the hooks. So N workers never write to the
MLflow SQLite store at once (SQLite does not tolerate concurrent writers well), and no
metric or run is lost.

Stages that must see the whole sweep (plots, the report) run in the main process once
their inputs are done.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.plan import Plan, Stage

__all__ = ["Backend", "ProcessBackend", "RayBackend", "execute_concurrently"]

_RUNNER: dict[str, Any] = {}


class Backend(Protocol):
    """Somewhere to run ``run_stage(stage, inputs, staging)`` calls concurrently."""

    workers: int

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]: ...

    def shutdown(self, cancel: bool = False) -> None: ...


def _initialise_worker(run_stage: Callable[..., Any], counter: Any) -> None:
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
    return _RUNNER["run_stage"](stage, inputs, staging)


class ProcessBackend:
    """``workers`` local processes (spawned, so each has its own torch runtime)."""

    def __init__(self, run_stage: Callable[..., Any], workers: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.workers = workers
        self.pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context,
            initializer=_initialise_worker, initargs=(run_stage, context.Value("i", 0)),
        )

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        return self.pool.submit(_run_in_worker, stage, inputs, staging)

    def shutdown(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class RayBackend:
    """Ray tasks on a local Ray instance or the cluster at ``address``.

    Each stage kind may ask for resources (``{"fit": {"num_cpus": 1, "num_gpus": 0}}``).
    """

    def __init__(
        self, run_stage: Callable[..., Any], address: str | None = None,
        resources: dict[str, dict[str, float]] | None = None, workers: int | None = None,
    ) -> None:
        from bayesflow.errors import MissingDependencyError

        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError(
                "execution.executor: ray needs Ray; install it with "
                "`pip install 'bayesflow-workflows[ray]'`"
            ) from exc
        self.ray = ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                options["address"] = address
            elif workers:
                options["num_cpus"] = workers
            ray.init(**options)
        self.workers = int(workers or ray.cluster_resources().get("CPU", 1))
        self.runner = ray.put(run_stage)
        self.resources = resources or {}

        @ray.remote
        def run_remote(runner: Any, stage: Stage, inputs: dict[str, Entry], staging: str) -> dict[str, Any]:
            return runner(stage, inputs, Path(staging))

        self.remote = run_remote

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        options = self.resources.get(stage.method or stage.kind, self.resources.get(stage.kind, {}))
        task = self.remote.options(**options) if options else self.remote
        return task.remote(self.runner, stage, inputs, str(staging)).future()

    def shutdown(self, cancel: bool = False) -> None:
        self.ray.shutdown()


def execute_concurrently(
    plan: Plan,
    run_stage: Callable[[Stage, dict[str, Entry], Path], dict[str, Any]],
    cache: Cache,
    hooks: Sequence[Any],
    backend: Backend,
    *,
    keep_going: bool,
    reuse: Callable[[Stage], Entry | None],
    outcome: Any,
) -> None:
    """Dispatch ready cacheable stages to ``backend``; run the rest in this process.

    ``outcome`` (an :class:`~bayesflow.dag.execute.Outcome`) is filled in place.
    """
    pending = {stage.name: stage for stage in plan.order()}
    running: dict[Future[dict[str, Any]], tuple[Stage, Path, float]] = {}
    try:
        while pending or running:
            progressed = _dispatch_ready(pending, running, run_stage, cache, hooks, backend,
                                         keep_going, reuse, outcome)
            if not running:
                if not progressed and pending:  # pragma: no cover - a cycle is impossible
                    raise RuntimeError(f"stages cannot run: {sorted(pending)}")
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                stage, staging, started = running.pop(future)
                _finish(stage, staging, started, future, cache, hooks, outcome)
    except KeyboardInterrupt:
        for future, (stage, staging, _) in running.items():
            future.cancel()
            cache.discard(staging)
        backend.shutdown(cancel=True)
        raise
    backend.shutdown()


def _dispatch_ready(
    pending: dict[str, Stage], running: dict[Future[dict[str, Any]], tuple[Stage, Path, float]],
    run_stage: Callable[..., Any], cache: Cache, hooks: Sequence[Any], backend: Backend,
    keep_going: bool, reuse: Callable[[Stage], Entry | None], outcome: Any,
) -> bool:
    """Start every stage whose inputs are done; return whether any stage moved on."""
    progressed = False
    for name, stage in list(pending.items()):
        states = [outcome.status.get(dependency) for dependency in stage.inputs]
        if any(state is None for state in states):
            continue
        del pending[name]
        progressed = True
        blocked = [d for d, s in zip(stage.inputs, states) if s not in ("ran", "cached")]
        if blocked or (outcome.failed and not keep_going):
            outcome.status[name] = "skipped"
            outcome.errors[name] = f"needs {', '.join(blocked)}" if blocked else "an earlier stage failed"
            continue
        entry = reuse(stage)
        if entry is not None:
            outcome.entries[name], outcome.status[name] = entry, "cached"
            for hook in hooks:
                hook.after_stage(stage, entry, cached=True)
            continue
        if not stage.cacheable:
            if running:  # plots and the report wait for every worker to finish first
                pending[name] = stage
                progressed = False
                continue
            from bayesflow.dag.execute import _run_one

            _run_one(stage, run_stage, cache, hooks, outcome)
            continue
        for hook in hooks:
            hook.before_stage(stage)
        staging = cache.staging(stage.key)
        inputs = {dependency: outcome.entries[dependency] for dependency in stage.inputs}
        running[backend.submit(stage, inputs, staging)] = (stage, staging, time.perf_counter())
    return progressed


def _finish(
    stage: Stage, staging: Path, started: float, future: Future[dict[str, Any]],
    cache: Cache, hooks: Sequence[Any], outcome: Any,
) -> None:
    """Commit a finished remote stage, or record its failure."""
    try:
        values = future.result()
        entry = cache.commit(stage.key, staging, values)
    except Exception as error:  # a failed stage must not stop independent ones  # noqa: BLE001
        cache.discard(staging)
        outcome.status[stage.name] = "failed"
        outcome.errors[stage.name] = str(error) or type(error).__name__
        detail = "".join(traceback.format_exception(error))
        for hook in hooks:
            hook.on_failure(stage, error, detail)
        return
    outcome.seconds[stage.name] = time.perf_counter() - started
    outcome.entries[stage.name], outcome.status[stage.name] = entry, "ran"
    for hook in hooks:
        hook.after_stage(stage, entry, cached=False)
