"""Run a plan's stages on an executor, reusing the cache and calling hooks around each.

The scheduler knows no algorithm: it is given a ``run_stage(stage, inputs, staging)``
function that computes one stage into a staging folder and returns its small values,
and an :class:`~bayesflow.dag.executors.Executor` to call it on. There is one loop for
every executor: it submits each stage whose inputs are done, waits for one to finish,
and commits it in this process. So this process is the only writer of the cache and the
only caller of hooks, whether stages ran inline, in worker processes or on Ray. Side
effects such as tracking live in hooks (Kedro's pattern), not in stages.

With ``keep_going`` a failed stage fails only itself and the stages that need its
outputs; independent stages still run, and so does a stage whose inputs are optional
(plots and the report): it gets the inputs that finished and is told which did not.
Stages with equal keys (two methods with equal settings under different names) are
computed once: the second waits for the first and reuses its output. Stages that are
not cacheable (no planned kind now) wait until no worker is busy and run in this process.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.executors import Executor, InlineExecutor, RunStage
from bayesflow.dag.plan import Plan, Stage
from bayesflow.stopping import deferred

__all__ = ["Hook", "IndexHook", "Outcome", "RunStage", "execute", "stage_status"]


class Hook(Protocol):
    """Called around stages, always in the scheduling process; every method may do nothing."""

    def before_stage(self, stage: Stage) -> None:
        """``stage`` is about to be computed."""
        ...

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None:
        """``stage`` finished (``cached``: its output was reused, not computed)."""
        ...

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None:
        """``stage`` failed with ``error``; ``detail`` is the formatted traceback."""
        ...

    def on_interrupt(self, stage: Stage | None) -> None:
        """The run was interrupted while ``stage`` ran (None: no stage, or several)."""
        ...


@dataclass
class Outcome:
    """What happened to every stage of one execution."""

    entries: dict[str, Entry] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # ran | cached | failed | skipped
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    placements: dict[str, dict[str, Any]] = field(default_factory=dict)  # where a stage ran
    # Stages counted as cached whose output another stage of this run (with the same key)
    # computed: a Laplace method's curvature shared by laplace_evidence, say.
    shared: set[str] = field(default_factory=set)

    @property
    def failed(self) -> list[str]:
        """Names of stages that failed."""
        return [name for name, status in self.status.items() if status == "failed"]

    @property
    def ok(self) -> bool:
        """Whether no stage failed or was skipped."""
        return all(status in ("ran", "cached") for status in self.status.values())


def _forced(stage: Stage, force: Sequence[str] | bool) -> bool:
    """Whether ``force`` (True, or glob patterns of stage names) asks to rerun ``stage``."""
    if isinstance(force, bool):
        return force
    return any(fnmatch.fnmatch(stage.name, pattern) for pattern in force)


def _on_finished_inputs(stage: Stage, blocked: list[str], outcome: Outcome) -> Stage:
    """``stage``, whose inputs are optional, on the inputs that finished. The blocked ones
    go into its config as ``missing`` (``{name: {"status", "error"}}``) for it to show, and
    its key covers which are missing, so that an output made without them is cached
    apart from the complete one."""
    missing = {name: {"status": outcome.status[name], "error": outcome.errors.get(name, "")} for name in blocked}
    key = hashlib.sha256(json.dumps([stage.key, sorted(missing)]).encode()).hexdigest()[:16]
    inputs = tuple(name for name in stage.inputs if name not in missing)
    return replace(stage, inputs=inputs, key=key, config={**stage.config, "missing": missing})


def stage_status(
    stage: Stage,
    cache: Cache,
    force: Sequence[str] | bool = False,
    index: dict[str, dict[str, Any]] | None = None,
) -> str:
    """What executing ``stage`` would do.

    Args:
        stage: the stage.
        cache: the stage cache.
        force: True, or glob patterns of stage names to rerun.
        index: the workflow's index (see :meth:`Cache.index`), to tell stale from new.

    Returns:
        ``cached`` when a finished output will be reused, ``forced`` when it will be rerun
        anyway, ``stale`` when the stage finished before under another key, else ``new``;
        ``always`` for stages that are never cached.
    """
    if not stage.cacheable:
        return "always"
    if cache.get(stage.key) is None:
        previous = (index or {}).get(stage.name)
        return "stale" if previous is not None and previous.get("key") != stage.key else "new"
    return "forced" if _forced(stage, force) else "cached"


class IndexHook:
    """Records the key and config each cacheable stage finished under in the cache's index,
    so a later plan can say what changed. Written when a stage is committed or reused."""

    def __init__(self, cache: Cache, workflow: str) -> None:
        """Read ``workflow``'s index from ``cache``."""
        self.cache, self.workflow = cache, workflow
        self.index = cache.index(workflow)

    def before_stage(self, stage: Stage) -> None:
        """Nothing to do before a stage."""

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None:
        """Remember ``stage``'s key and config (written only when they changed)."""
        if not stage.cacheable or self.index.get(stage.name, {}).get("key") == stage.key:
            return
        self.index[stage.name] = {"key": stage.key, "config": stage.config}
        self.cache.write_index(self.workflow, self.index)

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None:
        """A failed stage leaves the index as it was."""

    def on_interrupt(self, stage: Stage | None) -> None:
        """Finished stages are already recorded."""


def execute(
    plan: Plan,
    run_stage: RunStage,
    cache: Cache,
    hooks: Sequence[Hook] = (),
    *,
    executor: Executor | None = None,
    keep_going: bool = True,
    force: Sequence[str] | bool = False,
) -> Outcome:
    """Execute ``plan``; return the outcome of every stage.

    Args:
        plan: the stages.
        run_stage: computes one stage; stages that are not cacheable always run with it
            in this process.
        cache: finished outputs, reused unless forced or an input was recomputed.
        hooks: called around every stage, in this process.
        executor: where cacheable stages are computed (default: inline, one by one);
            ``execute`` shuts it down when it returns or raises.
        keep_going: after a failure, keep running the stages that do not need it.
        force: True to recompute every stage, or glob patterns of stage names.

    Returns:
        Every stage's status (``ran``, ``cached``, ``failed`` or ``skipped``), entry,
        error text and seconds.

    Raises:
        KeyboardInterrupt: after hooks were told and unfinished outputs were discarded.
    """
    scheduler = _Scheduler(
        plan, run_stage, cache, [IndexHook(cache, plan.workflow), *hooks],
        executor if executor is not None else InlineExecutor(run_stage), keep_going, force,
    )
    return scheduler.run()


@dataclass
class _Flight:
    """A submitted stage: where it writes and when it started."""

    stage: Stage
    staging: Path
    started: float


class _Scheduler:
    """The state of one execution: stages pending, in flight, and finished keys."""

    def __init__(
        self, plan: Plan, run_stage: RunStage, cache: Cache, hooks: Sequence[Hook],
        executor: Executor, keep_going: bool, force: Sequence[str] | bool,
    ) -> None:
        self.plan, self.cache, self.hooks, self.executor = plan, cache, hooks, executor
        self.keep_going, self.force = keep_going, force
        self.local = executor if executor.accepts_uncacheable else InlineExecutor(run_stage)
        self.outcome = Outcome()
        self.pending = {stage.name: stage for stage in plan.order()}
        self.running: dict[Future[dict[str, Any]], _Flight] = {}
        self.submitting: _Flight | None = None
        self.computing: dict[str, str] = {}  # key -> the stage computing it
        self.computed: dict[str, Entry] = {}  # key -> its output committed in this run
        self.failures: dict[str, tuple[BaseException, str]] = {}  # key -> error, traceback

    def run(self) -> Outcome:
        """Dispatch and finish stages until none is left."""
        self.cache.clean_staging()
        try:
            while self.pending or self.running:
                moved = self._dispatch()
                if self.running:
                    self._collect()
                elif not moved and self.pending:  # pragma: no cover - a plan has no cycle
                    raise RuntimeError(f"stages cannot run: {sorted(self.pending)}")
        except KeyboardInterrupt:
            current = self._abandon()
            for hook in self.hooks:
                hook.on_interrupt(current)
            raise
        except BaseException:
            self._abandon()
            raise
        finally:
            self.outcome.placements.update(getattr(self.executor, "placements", {}))
        self.executor.shutdown()
        return self.outcome

    def _abandon(self) -> Stage | None:
        """Cancel what is in flight and discard its staging; return the stage in flight
        when there is exactly one."""
        flights = list(self.running.values())
        if self.submitting is not None:
            flights.append(self.submitting)
        for future in self.running:
            future.cancel()
        self.executor.shutdown(cancel=True)
        for flight in flights:
            self.cache.discard(flight.staging)
        return flights[0].stage if len(flights) == 1 else None

    def _dispatch(self) -> bool:
        """Settle or submit every stage whose inputs are done, while a worker is free;
        return whether any stage left the pending ones."""
        moved = False
        for name, stage in list(self.pending.items()):
            if len(self.running) >= self.executor.workers:
                break
            states = [self.outcome.status.get(dependency) for dependency in stage.inputs]
            if None in states:
                continue
            if self._start(stage, states):
                del self.pending[name]
                moved = True
        return moved

    def _start(self, stage: Stage, states: list[str | None]) -> bool:
        """Skip, reuse or submit ``stage``; return False when it must wait."""
        blocked = [name for name, state in zip(stage.inputs, states) if state not in ("ran", "cached")]
        if blocked and stage.optional_inputs:
            stage, blocked = _on_finished_inputs(stage, blocked, self.outcome), []
        if blocked or (self.outcome.failed and not self.keep_going):
            self.outcome.status[stage.name] = "skipped"
            self.outcome.errors[stage.name] = (
                f"needs {', '.join(blocked)}" if blocked else "an earlier stage failed"
            )
            return True
        if not stage.cacheable:
            if self.running:  # plots and the report wait for every worker to finish first
                return False
            self._submit(stage, self.local)
            return True
        # A kind the executor leaves to this process (Ray: the report, whose kernel this
        # process started while the fits ran).
        executor = self.local if stage.kind in getattr(self.executor, "driver_kinds", ()) else self.executor
        if stage.key in self.computing:  # the same key is being computed: reuse it after
            return False
        if stage.key in self.computed:
            self.outcome.shared.add(stage.name)
            self._succeed(stage, self.computed[stage.key], cached=True)
            return True
        if stage.key in self.failures:
            self._fail(stage, *self.failures[stage.key])
            return True
        entry = self._reusable(stage)
        if entry is not None:
            self._succeed(stage, entry, cached=True)
            return True
        self._submit(stage, executor)
        return True

    def _reusable(self, stage: Stage) -> Entry | None:
        """A cached entry to reuse: not forced, and none of its inputs recomputed in this run."""
        if _forced(stage, self.force):
            return None
        for name in stage.inputs:
            if self.outcome.status.get(name) == "ran" or self.plan.stages[name].key in self.computed:
                return None
        return self.cache.get(stage.key)

    def _submit(self, stage: Stage, executor: Executor) -> None:
        """Tell the hooks, then hand ``stage`` to ``executor``."""
        for hook in self.hooks:
            hook.before_stage(stage)
        staging = self.cache.staging(stage.key)
        inputs = {name: self.outcome.entries[name] for name in stage.inputs}
        self.submitting = flight = _Flight(stage, staging, time.perf_counter())
        try:
            future = executor.submit(stage, inputs, staging)
        except Exception as error:  # e.g. a broken pool: this stage fails  # noqa: BLE001
            future = Future()
            future.set_exception(error)
        self.running[future] = flight
        self.submitting = None
        if stage.cacheable:
            self.computing[stage.key] = stage.name

    def _collect(self) -> None:
        """Wait for at least one stage in flight and finish every one that is done."""
        done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        for future in sorted(done, key=lambda item: self.running[item].started):
            self._finish(self.running[future], future)
            del self.running[future]

    def _finish(self, flight: _Flight, future: Future[dict[str, Any]]) -> None:
        """Commit a finished stage in this process, or record its failure. A stop signal
        (SIGTERM) waits until the hooks were told, so a committed stage is logged too."""
        with deferred():
            self._settle(flight, future)

    def _settle(self, flight: _Flight, future: Future[dict[str, Any]]) -> None:
        stage = flight.stage
        if self.computing.get(stage.key) == stage.name:
            del self.computing[stage.key]
        try:
            entry = self.cache.commit(stage.key, flight.staging, future.result())
        except Exception as raised:  # a failed stage must not stop independent ones  # noqa: BLE001
            error = self.cache.explain(raised, stage.key)  # a full disk under the cache, named
            self.cache.discard(flight.staging)
            detail = "".join(traceback.format_exception(error))
            if stage.cacheable:
                self.failures[stage.key] = (error, detail)
            self._fail(stage, error, detail)
            return
        self.outcome.seconds[stage.name] = time.perf_counter() - flight.started
        if stage.cacheable:
            self.computed[stage.key] = entry
        self._succeed(stage, entry, cached=False)

    def _succeed(self, stage: Stage, entry: Entry, cached: bool) -> None:
        """Record ``stage``'s entry and tell every hook (a stop signal waits for that)."""
        with deferred():
            self.outcome.entries[stage.name] = entry
            self.outcome.status[stage.name] = "cached" if cached else "ran"
            for hook in self.hooks:
                hook.after_stage(stage, entry, cached=cached)

    def _fail(self, stage: Stage, error: BaseException, detail: str) -> None:
        """Record ``stage``'s failure with the whole error text and tell the hooks."""
        self.outcome.status[stage.name] = "failed"
        self.outcome.errors[stage.name] = str(error) or type(error).__name__
        for hook in self.hooks:
            hook.on_failure(stage, error, detail)
