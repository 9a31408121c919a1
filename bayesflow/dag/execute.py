"""Run a plan's stages in order, reusing the cache and calling hooks around each stage.

The executor knows no algorithm: it is given a ``run_stage(stage, inputs, staging)``
function that computes one stage into a staging folder and returns its small values.
Side effects such as tracking live in hooks (Kedro's pattern), not in stages.

With ``keep_going`` a failed stage fails only itself and the stages that need its
outputs; independent stages still run.
"""

from __future__ import annotations

import fnmatch
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.plan import Plan, Stage

__all__ = ["Hook", "IndexHook", "Outcome", "RunStage", "execute", "stage_status"]

RunStage = Callable[[Stage, dict[str, Entry], Path], dict[str, Any]]


class Hook(Protocol):
    """Called around stages; every method is optional to implement meaningfully."""

    def before_stage(self, stage: Stage) -> None: ...

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None: ...

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None: ...

    def on_interrupt(self, stage: Stage | None) -> None: ...


@dataclass
class Outcome:
    """What happened to every stage of one execution."""

    entries: dict[str, Entry] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)  # ran | cached | failed | skipped
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Names of stages that failed."""
        return [name for name, status in self.status.items() if status == "failed"]

    @property
    def ok(self) -> bool:
        """Whether no stage failed or was skipped."""
        return all(status in ("ran", "cached") for status in self.status.values())


def _forced(stage: Stage, force: Sequence[str] | bool) -> bool:
    if isinstance(force, bool):
        return force
    return any(fnmatch.fnmatch(stage.name, pattern) for pattern in force)


def _reusable(stage: Stage, cache: Cache, force: Sequence[str] | bool, outcome: Outcome) -> Entry | None:
    """A cached entry to reuse: not forced, and none of its inputs recomputed in this run."""
    if not stage.cacheable or _forced(stage, force):
        return None
    if any(outcome.status.get(name) == "ran" for name in stage.inputs):
        return None
    return cache.get(stage.key)


def stage_status(
    stage: Stage,
    cache: Cache,
    force: Sequence[str] | bool = False,
    index: dict[str, dict[str, Any]] | None = None,
) -> str:
    """``cached`` when a finished output will be reused, ``forced`` when it will be rerun
    anyway, ``stale`` when the stage finished before under another key (``index``, see
    :meth:`Cache.index`), else ``new``; ``always`` for stages that are never cached."""
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
    keep_going: bool = True,
    force: Sequence[str] | bool = False,
    backend: Any = None,
) -> Outcome:
    """Execute ``plan``; return the outcome of every stage.

    With a ``backend`` (:mod:`bayesflow.dag.schedule`), independent fit and evaluate
    stages run concurrently on it while hooks and the cache stay in this process.

    Raises:
        KeyboardInterrupt: after hooks were told, so running stages end marked killed.
    """
    outcome = Outcome()
    cache.clean_staging()
    hooks = [IndexHook(cache, plan.workflow), *hooks]
    current: Stage | None = None
    if backend is not None:
        from bayesflow.dag.schedule import execute_concurrently

        def reuse(stage: Stage) -> Entry | None:
            return _reusable(stage, cache, force, outcome)

        try:
            execute_concurrently(plan, run_stage, cache, hooks, backend,
                                 keep_going=keep_going, reuse=reuse, outcome=outcome)
        except KeyboardInterrupt:
            for hook in hooks:
                hook.on_interrupt(None)
            raise
        return outcome
    try:
        for stage in plan.order():
            current = stage
            blocked = [name for name in stage.inputs if outcome.status.get(name) not in ("ran", "cached")]
            if blocked or (outcome.failed and not keep_going):
                outcome.status[stage.name] = "skipped"
                outcome.errors[stage.name] = f"needs {', '.join(blocked)}" if blocked else "an earlier stage failed"
                continue
            entry = _reusable(stage, cache, force, outcome)
            if entry is not None:
                outcome.entries[stage.name], outcome.status[stage.name] = entry, "cached"
                for hook in hooks:
                    hook.after_stage(stage, entry, cached=True)
                continue
            _run_one(stage, run_stage, cache, hooks, outcome)
        current = None
    except KeyboardInterrupt:
        for hook in hooks:
            hook.on_interrupt(current)
        raise
    return outcome


def _run_one(
    stage: Stage, run_stage: RunStage, cache: Cache, hooks: Sequence[Hook], outcome: Outcome
) -> None:
    for hook in hooks:
        hook.before_stage(stage)
    staging = cache.staging(stage.key)
    inputs = {name: outcome.entries[name] for name in stage.inputs}
    start = time.perf_counter()
    try:
        values = run_stage(stage, inputs, staging)
        entry = cache.commit(stage.key, staging, values)
    except KeyboardInterrupt:
        cache.discard(staging)
        raise
    except Exception as error:  # a failed stage must not stop independent ones  # noqa: BLE001
        cache.discard(staging)
        outcome.status[stage.name] = "failed"
        outcome.errors[stage.name] = str(error) or type(error).__name__
        detail = traceback.format_exc()
        for hook in hooks:
            hook.on_failure(stage, error, detail)
        return
    outcome.seconds[stage.name] = time.perf_counter() - start
    outcome.entries[stage.name], outcome.status[stage.name] = entry, "ran"
    for hook in hooks:
        hook.after_stage(stage, entry, cached=False)
