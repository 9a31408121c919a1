"""Case 3: the default workflow end to end, and the shares of tracking and the report.

``bayesflow.api.run`` on the bundled ``cold_posterior`` workflow in a temporary working
directory (its own MLflow store, cache and reports), with two instruments:

- the **tracking** share is what the run waits for: opening the store, the parent run
  and every MLflow call are made by the tracking worker process while the stages compute
  (:mod:`bayesflow.tracking.background`, :mod:`bayesflow.tracking.worker`), and the run waits only at its end, for the
  worker's last calls and the parent's end (``BackgroundHook.finish``, timed). The
  worker's own calls are not timed here (in ``smoke``, with the in-memory tracker on a
  thread, :class:`TimingTracker` adds up every call by the thread that made it); the
  cross-check below measures what tracking costs the run as a whole;
- :class:`StageTimer`, a hook, records each stage's kind and whether it was cached; the
  executor's ``outcome.seconds`` gives each stage's compute seconds.

Shares of the wall time: compute (fit and evaluate stages), report (plot and report
stages, which read the store and run papermill), tracking (MLflow calls), and the rest
(loading the data, planning, the cache, hooks). The stage time is the sum of every
stage's seconds. Then the same workflow runs again in the same folder with nothing to
do (every stage cached): the no-op rerun's wall time against the full run's. Last (not in
``smoke``), the cross-check: the workflow once more in a fresh folder with the in-memory
tracker, no plots and no report; the full run's wall minus this one's, over the full
run's, is what tracking, plots and the report add, contention included.

Warm-up: before the timed run, a one-epoch MAP workflow with the in-memory tracker runs
untimed (torch, the data, the planner, the engines); importing mlflow and creating the
store are not warmed, since every ``bayesflow run`` pays them once. ``quick`` runs one
seed with fewer epochs; ``smoke`` runs one MAP epoch at one temperature with an
in-memory tracker and no report, to exercise the code path only.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import ROOT
from benchmarks.common.timing import Settings, load_average
from benchmarks.speed.grids import working_directory

__all__ = ["QUICK_OVERRIDES", "StageTimer", "TimingTracker", "run"]

WORKFLOW = ROOT / "workflows" / "cold_posterior.yaml"
# Stage kinds that compute (the rest, plot and report, render).
COMPUTE_KINDS = ("fit", "fit_group", "curvature", "evaluate", "prior_predictive")
QUICK_OVERRIDES = [
    "seeds=[0]",
    "methods.map.epochs=30",
    "methods.vi.epochs=30",
    "methods.sghmc.epochs=60",
    "methods.sghmc.burn_in=160",
    "methods.parallel_sghmc.epochs=30",
]
SMOKE_OVERRIDES = [
    "seeds=[0]",
    "temperatures=[1.0]",
    "methods={map: {engine: map, epochs: 1, batch_size: 128}}",
    "plots=[]",
    "report.enabled=false",
]


class TimingTracker:
    """A tracker that delegates every call to ``inner`` and adds up its seconds by method.

    Args:
        inner: the tracker bayesflow would otherwise use (an ``MlflowTracker``).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        # Seconds of the calls made on the thread that created the tracker (the run's),
        # and the seconds the run waited at its end for the tracking worker.
        self.owner = threading.get_ident()
        self.blocking = 0.0
        self.waiting = 0.0
        # The first call imports mlflow and creates the store (its SQLite schema): a cost
        # paid once per store, reported apart from the steady per-run cost.
        self.first_call: tuple[str, float, bool] | None = None

    @property
    def uri(self) -> str:
        """The wrapped tracker's URI (stages read the store back through it)."""
        return str(self.inner.uri)

    @property
    def total(self) -> float:
        """Seconds spent inside the wrapped tracker."""
        return sum(self.seconds.values())

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute
        return self._timed(name, attribute)

    def _timed(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - began
                self.seconds[name] += seconds
                self.calls[name] += 1
                if threading.get_ident() == self.owner:
                    self.blocking += seconds
                if self.first_call is None:
                    self.first_call = (name, seconds, threading.get_ident() == self.owner)

        return timed


class StageTimer:
    """A hook recording each stage's kind, whether it was cached, and failures."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        self.cached: list[str] = []
        self.failed: list[str] = []

    def before_stage(self, stage: Any) -> None:
        self.kinds[stage.name] = stage.kind

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self.kinds[stage.name] = stage.kind
        if cached:
            self.cached.append(stage.name)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self.failed.append(stage.name)

    def on_interrupt(self, stage: Any) -> None:
        pass


def overrides_for(mode: str) -> list[str]:
    """The overrides each mode applies to the default workflow."""
    return {"full": [], "quick": QUICK_OVERRIDES, "smoke": SMOKE_OVERRIDES}[mode]


def run_once(
    loaded: Any, folder: Path, smoke: bool
) -> tuple[Any, TimingTracker, StageTimer, float]:
    """One ``api.run`` of ``loaded`` in ``folder``: the result, the instruments, the wall."""
    from bayesflow import api

    timer = StageTimer()
    began = time.perf_counter()
    if smoke:
        from bayesflow.tracking import InMemoryTracker

        inner: Any = InMemoryTracker(folder / "artifacts")
    else:
        from bayesflow.tracking import MlflowTracker

        inner = MlflowTracker(api.tracking_uri_of(loaded))
    tracker = TimingTracker(inner)
    # The fits' pyfunc models are logged with their own MLflow client (tracking/pyfunc.py),
    # outside the tracker: the hook's `_log_model` is timed as a tracker method.
    from bayesflow.tracking.hook import TrackingHook

    log_model = TrackingHook._log_model

    def timed_log_model(hook: Any, *args: Any) -> None:
        tracker._timed("log_model", lambda: log_model(hook, *args))()

    from bayesflow.tracking.background import BackgroundHook

    finish = BackgroundHook.finish

    def timed_finish(hook: Any, *args: Any) -> Any:
        began = time.perf_counter()
        try:
            return finish(hook, *args)
        finally:
            tracker.waiting += time.perf_counter() - began

    TrackingHook._log_model = timed_log_model  # type: ignore[method-assign,assignment]
    BackgroundHook.finish = timed_finish  # type: ignore[method-assign]
    try:
        # An MLflow store as `bayesflow run` has it: written by the tracking worker process,
        # whose calls this process cannot time (the wrapper would keep them on a thread).
        result = api.run(loaded, hooks=[timer], tracker=tracker if smoke else inner)
    finally:
        TrackingHook._log_model = log_model  # type: ignore[method-assign,assignment]
        BackgroundHook.finish = finish  # type: ignore[method-assign]
    wall = time.perf_counter() - began
    if not result.outcome.ok:
        raise RuntimeError(f"the default workflow failed: {result.outcome.errors}")
    return result, tracker, timer, wall


def warm_up(settings: Settings, workflow: Path) -> None:
    """The smoke workflow, untimed, with the in-memory tracker (see the module doc)."""
    import tempfile

    from bayesflow import api

    overrides = SMOKE_OVERRIDES + [f"execution.device={settings.device}"]
    with (
        tempfile.TemporaryDirectory(prefix="bayesflow-bench-") as folder,
        working_directory(Path(folder)),
    ):
        run_once(api.load(workflow, overrides), Path(folder), smoke=True)


def run(settings: Settings, workflow: Path = WORKFLOW) -> dict[str, Any]:
    """Run the workflow once in a temporary folder, then again with nothing to do."""
    import tempfile

    from bayesflow import api

    overrides = overrides_for(settings.mode) + [f"execution.device={settings.device}"]
    if not settings.smoke:
        warm_up(settings, workflow)
    load = load_average()
    with (
        tempfile.TemporaryDirectory(prefix="bayesflow-bench-") as folder,
        working_directory(Path(folder)),
    ):
        began = time.perf_counter()
        loaded = api.load(workflow, overrides)
        load_s = time.perf_counter() - began
        result, tracker, timer, wall = run_once(loaded, Path(folder), settings.smoke)
        wall += load_s
        began = time.perf_counter()
        _, _, rerun_timer, _ = run_once(api.load(workflow, overrides), Path(folder), settings.smoke)
        rerun_wall = time.perf_counter() - began
    bare = None if settings.smoke else bare_run(workflow, overrides)
    torch.set_num_threads(settings.threads)  # the fit stages set the spec's threads
    summary = shares(result, tracker, timer, wall)
    if bare is not None:
        # The cross-check: what tracking, plots and the report add to the wall, by difference.
        summary.update(bare_wall_s=bare[0], bare_compute_s=bare[1], added_share=(wall - bare[0]) / wall)
    summary.update(
        workflow=workflow.name,
        overrides=overrides,
        tracker=type(tracker.inner).__name__,
        rerun_wall_s=rerun_wall,
        rerun_cached_stages=len(rerun_timer.cached),
        rerun_stages=len(rerun_timer.kinds),
        rerun_ratio=rerun_wall / wall,
        load_average=[load, load_average()],
    )
    return summary


def bare_run(workflow: Path, overrides: list[str]) -> tuple[float, float]:
    """The same workflow in a fresh folder with the in-memory tracker, no plots and no
    report: the wall of its computation alone (loading and planning included)."""
    import tempfile

    from bayesflow import api
    from bayesflow.tracking import InMemoryTracker

    with (
        tempfile.TemporaryDirectory(prefix="bayesflow-bench-") as folder,
        working_directory(Path(folder)),
    ):
        began = time.perf_counter()
        loaded = api.load(workflow, [*overrides, "plots=[]", "report.enabled=false"])
        result = api.run(loaded, tracker=InMemoryTracker(Path(folder) / "artifacts"))
        wall = time.perf_counter() - began
    if not result.outcome.ok:
        raise RuntimeError(f"the default workflow (bare) failed: {result.outcome.errors}")
    compute = sum(
        seconds for name, seconds in result.outcome.seconds.items()
        if result.plan.stages[name].kind in COMPUTE_KINDS
    )
    return wall, compute


def shares(result: Any, tracker: TimingTracker, timer: StageTimer, wall: float) -> dict[str, Any]:
    """Seconds and shares of the wall time by part (see the module doc)."""
    by_kind: dict[str, float] = defaultdict(float)
    for name, seconds in result.outcome.seconds.items():
        by_kind[timer.kinds.get(name, name.split("/", 1)[0])] += seconds
    compute = sum(by_kind.get(kind, 0.0) for kind in COMPUTE_KINDS)
    report = by_kind.get("plot", 0.0) + by_kind.get("report", 0.0)
    # What the run waited for: calls on its own thread and the wait for the worker.
    tracking = tracker.blocking + tracker.waiting
    first = tracker.first_call or ("none", 0.0, True)
    return {
        "stages": len(result.outcome.seconds),
        "cached_stages": len(timer.cached),
        "wall_s": wall,
        "stage_time_s": sum(by_kind.values()),
        "compute_s": compute,
        "report_s": report,
        "tracking_s": tracking,
        "other_s": wall - compute - report - tracking,
        "stage_s": dict(by_kind),
        "tracking_calls": {
            name: {"calls": tracker.calls[name], "seconds": seconds}
            for name, seconds in sorted(tracker.seconds.items())
        },
        "tracking_first_call": {"method": first[0], "seconds": first[1], "waited_for": first[2]},
        "tracking_calls_s": tracker.total,
        "tracking_blocking_calls_s": tracker.blocking,
        "tracking_wait_s": tracker.waiting,
        "tracking_overlapped_s": tracker.total - tracker.blocking,
        "tracking_share": tracking / wall,
        "tracking_steady_share": (tracking - (first[1] if first[2] else 0.0)) / wall,
        "report_share": report / wall,
        "tracking_report_share": (tracking + report) / wall,
        # Everything that is not fit/evaluate compute: an upper bound of the overhead.
        "non_compute_share": (wall - compute) / wall,
    }
