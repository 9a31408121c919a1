"""Opening a run's tracking: stale runs ended, the parent run, the spec, the hook.

:func:`open_tracking` does what a ``bayesflow run`` writes to the store before its first
stage's artefact exists: it ends runs an earlier process left RUNNING
(:func:`~bayesflow.tracking.hook.end_stale_runs`), starts the parent run with the
workflow's params and tags, logs the resolved spec (and each sweep variant's), and
returns the :class:`~bayesflow.tracking.hook.TrackingHook` that logs every stage under
that parent; :func:`finish_tracking` closes it. ``bayesflow.api.run`` calls both on the
tracking worker (:class:`~bayesflow.tracking.background.BackgroundHook`), so importing
mlflow and opening (or creating) the store overlap the first stages instead of
preceding them; nothing the stages compute depends on it.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from bayesflow.tracking.hook import TrackingHook, end_stale_runs, process_tags

if TYPE_CHECKING:
    from bayesflow.dag.plan import Plan
    from bayesflow.spec.load import LoadedSpec
    from bayesflow.spec.sweep import Sweep

__all__ = ["end_own_runs", "finish_tracking", "open_tracking", "parent_params", "worker_is_process"]

# MLflow keeps tag values up to 5,000 characters (hook.TAG_LIMIT).
SWEEP_TAG_LIMIT = 5000


def parent_params(loaded: LoadedSpec, data_digest: str, sweep: Sweep | None) -> dict[str, Any]:
    """The parent run's params: the workflow's grid, its data and, for a sweep, what it
    sweeps."""
    spec = loaded.spec
    params: dict[str, Any] = {
        "workflow": spec.name, "temperature_convention": spec.temperature_convention,
        "temperatures": list(spec.temperatures), "seeds": list(spec.seeds),
        "methods": list(spec.methods), "dataset": spec.data.name, "data_digest": data_digest[:16],
    }
    if sweep is not None:
        params.update(swept_keys=list(sweep.keys), variants=len(sweep.variants))
    return params


def open_tracking(
    tracker: Any, loaded: LoadedSpec, plan: Plan, experiment: str, data_digest: str,
    sweep: Sweep | None = None, process: dict[str, str] | None = None,
    sizes: dict[str, dict[str, Any]] | None = None,
) -> TrackingHook:
    """End stale runs, start the parent run, log the spec(s); the hook for the stages.

    ``process``: the :func:`~bayesflow.tracking.hook.process_tags` of the process that
    runs the stages (a worker process passes its owner's: ``bayesflow.pid`` names the
    process whose Ctrl-C ends these runs and whose death makes them stale). ``sizes``:
    the loaded data's sizes by variant label (:class:`TrackingHook`), so that the worker
    need not load the data, a tokenizer or torch to log a fit's model.
    """
    spec = loaded.spec
    process = process or process_tags()
    end_stale_runs(tracker, experiment)
    tags = {
        "bayesflow.role": "parent", "bayesflow.workflow": spec.name,
        "bayesflow.plan_key": plan.key, **process,
    }
    if sweep is not None:
        tags["bayesflow.sweep"] = " | ".join(v.label for v in sweep.variants)[:SWEEP_TAG_LIMIT]
    parent_id = str(tracker.start_run(
        experiment, f"{spec.name} {time.strftime('%Y-%m-%d %H:%M:%S')}",
        params=parent_params(loaded, data_digest, sweep), tags=tags,
    ))
    tracker.log_text(parent_id, loaded.to_yaml(), "spec/resolved.yaml")
    variants: dict[str, LoadedSpec] = {}
    if sweep is not None:
        variants = {item.label: item.loaded for item in sweep.variants}
        for item in sweep.variants:
            tracker.log_text(parent_id, item.loaded.to_yaml(), f"spec/variants/{item.tag}.yaml")
    return TrackingHook(tracker, loaded, plan, parent_id, experiment, variants=variants, process=process,
                        sizes=sizes)


def finish_tracking(
    hook: TrackingHook, metrics: dict[str, float], status: str
) -> tuple[str, dict[str, str]]:
    """Publish which run holds each fit, log the parent's ``metrics`` and end it with
    ``status``; the parent run's id and each fit stage's run id."""
    hook.publish_stages()
    hook.tracker.log_batch(hook.parent_id, metrics=metrics)
    hook.tracker.end_run(hook.parent_id, status)
    return hook.parent_id, dict(hook.runs)


def worker_is_process(tracker: Any, computing: bool = True) -> bool:
    """Whether the tracking worker is a process (tracking/background.py): for an MLflow
    store while stages compute or when one was prestarted (``bayesflow run`` starts it
    before loading the data), unless BAYESFLOW_TRACKING_WORKER is ``thread`` (or
    ``process``: always). Started late with every stage cached, nothing competes for the
    GIL and a thread saves starting a second interpreter (a no-op rerun of a tiny
    workflow: 7.6 s against 5.5 s from the command line, measured). Other trackers live in
    this process."""
    from bayesflow.tracking.background import prestarted
    from bayesflow.tracking.mlflow_tracker import MlflowTracker  # mlflow itself is not imported

    worker = os.environ.get("BAYESFLOW_TRACKING_WORKER", "")
    mlflow = type(tracker) is MlflowTracker  # a wrapper of one lives in this process
    return mlflow and worker != "thread" and (computing or worker == "process" or prestarted())


def end_own_runs(tracker: Any, experiment: str, status: str, reason: str | None = None) -> None:
    """End every run this process left RUNNING (an interrupt can land between a run's
    creation and its end, wherever that is) with ``status``; ``reason`` (default for
    KILLED: ``interrupted``) goes to its ``bayesflow.error`` tag."""
    from bayesflow.tracking.hook import ERROR_LIMIT

    if reason is None and status == "KILLED":
        reason = "interrupted"
    for record in tracker.search_runs(experiment, status="RUNNING"):
        if record.tags.get("bayesflow.pid") == str(os.getpid()):
            if reason:
                tracker.set_tags(record.run_id, {"bayesflow.error": reason[:ERROR_LIMIT]})
            tracker.end_run(record.run_id, status)
