"""The Python API: everything the command line does, for people who live in notebooks.

    import bayesflow
    loaded = bayesflow.load("workflows/cold_posterior.yaml", ["seeds=[0]"])
    outcome = bayesflow.run(loaded)
    frame = bayesflow.results(outcome.run_id, tracking_uri=outcome.tracking_uri)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Cache
from bayesflow.dag.plan import Plan, plan_workflow
from bayesflow.dag.scheduler import Hook, Outcome, execute, stage_status
from bayesflow.data import Dataset, load_dataset
from bayesflow.errors import TrackingError
from bayesflow.spec.load import LoadedSpec, load_spec

__all__ = [
    "RunResult", "artifacts", "compare", "evaluations", "histories", "load", "plan",
    "plan_table", "posteriors", "report", "results", "run", "run_spec", "tracking_uri_of",
]


def load(source: str | Path | dict[str, Any], overrides: Sequence[str] = ()) -> LoadedSpec:
    """Load and validate a spec (a YAML path or a mapping) with optional overrides."""
    return load_spec(source, list(overrides))


def _dataset(loaded: LoadedSpec) -> Dataset:
    from bayesflow.data import check_data

    dataset = load_dataset(loaded.spec.data.model_dump(), loaded.base_dir)
    check_data(dataset, loaded.spec.likelihood.name)  # before any fit: a DataError, exit 3
    return dataset


def plan(loaded: LoadedSpec, dataset: Dataset | None = None) -> Plan:
    """Plan a loaded spec into stages (loads the data to know its digest)."""
    dataset = dataset if dataset is not None else _dataset(loaded)
    return plan_workflow(loaded.spec, dataset.digest)


def plan_table(loaded: LoadedSpec, force: Sequence[str] | bool = False) -> list[dict[str, Any]]:
    """One row per stage: name, kind, status (new / cached / stale / forced / always), the
    reason of a stale status (what changed since the stage last finished), key, inputs."""
    from bayesflow.dag.plan import describe_change

    the_plan = plan(loaded)
    cache = Cache(loaded.spec.execution.cache_dir)
    index = cache.index(the_plan.workflow)
    rows = []
    for stage in the_plan.order():
        status = stage_status(stage, cache, force, index)
        previous = index.get(stage.name) or {}
        reason = describe_change(stage, previous.get("config") or {}) if status == "stale" else ""
        rows.append({
            "stage": stage.name, "kind": stage.kind, "status": status, "reason": reason,
            "key": stage.key, "inputs": list(stage.inputs),
        })
    return rows


def tracking_uri_of(loaded: LoadedSpec) -> str:
    """The spec's tracking URI made absolute (relative SQLite paths are from the cwd)."""
    from bayesflow.tracking import resolve_tracking_uri

    return resolve_tracking_uri(loaded.spec.tracking.uri, Path.cwd())


@dataclass
class RunResult:
    """What one ``run`` did."""

    run_id: str
    tracking_uri: str
    experiment: str
    outcome: Outcome
    report_dir: Path
    seconds: float
    fit_runs: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when every stage finished, 1 when a stage failed (DESIGN.md contract)."""
        return 0 if self.outcome.ok else 1

    @property
    def report_html(self) -> Path | None:
        """The rendered HTML report, if the report stage ran."""
        entry = self.outcome.entries.get("report")
        return Path(entry.values["html"]) if entry else None


@Cache.holding_lock(lambda loaded: loaded.spec.execution.cache_dir)  # one run per cache folder
def run(
    loaded: LoadedSpec,
    *,
    force: Sequence[str] | bool = False,
    keep_going: bool | None = None,
    hooks: Sequence[Hook] = (),
    tracker: Any = None,
) -> RunResult:
    """Run a workflow: plan, execute every stage with caching, track, report.

    Args:
        loaded: the validated spec.
        force: True to rerun every stage, or glob patterns of stage names to rerun.
        keep_going: keep running independent stages after a failure (default: the
            spec's ``execution.keep_going``, itself True by default for sweeps).
        hooks: extra hooks (e.g. a progress display).
        tracker: a tracker to use instead of MLflow at the spec's URI (tests).
    """
    from bayesflow.hooks import TrackingHook, end_stale_runs, report_folder
    from bayesflow.stages import StageRunner

    began = time.perf_counter()
    spec = loaded.spec
    if tracker is None:
        from bayesflow.tracking import MlflowTracker

        tracker = MlflowTracker(tracking_uri_of(loaded))
    experiment = spec.tracking.experiment or spec.name
    dataset = _dataset(loaded)
    the_plan = plan_workflow(spec, dataset.digest)
    end_stale_runs(tracker, experiment)
    parent_id = tracker.start_run(
        experiment, f"{spec.name} {time.strftime('%Y-%m-%d %H:%M:%S')}",
        params={
            "workflow": spec.name, "temperature_convention": spec.temperature_convention,
            "temperatures": list(spec.temperatures), "seeds": list(spec.seeds),
            "methods": list(spec.methods), "dataset": spec.data.name, "data_digest": dataset.digest[:16],
        },
        tags={"bayesflow.role": "parent", "bayesflow.workflow": spec.name,
              "bayesflow.plan_key": the_plan.key, **_process_tags()},
    )
    tracker.log_text(parent_id, loaded.to_yaml(), "spec/resolved.yaml")
    report_dir = report_folder(spec.report.output_dir, spec.name, parent_id)
    cache = Cache(spec.execution.cache_dir)
    tracking = TrackingHook(tracker, loaded, the_plan, cache, parent_id, experiment)
    runner = StageRunner(loaded, dataset, report_dir, {"run_id": parent_id, "tracking_uri": tracker.uri})
    going = spec.execution.keep_going if keep_going is None else keep_going
    backend = _backend(loaded, runner)
    try:
        outcome = execute(
            the_plan, runner, cache, [tracking, *hooks], executor=backend, keep_going=going, force=force
        )
    except KeyboardInterrupt:
        _end_own_runs(tracker, experiment, "KILLED")
        raise
    except BaseException:
        tracker.end_run(parent_id, "FAILED")
        raise
    if not tracking._published:
        tracking.publish_stages()
    tracker.log_metrics(parent_id, {
        "stages_failed": float(len(outcome.failed)),
        "stages_cached": float(sum(s == "cached" for s in outcome.status.values())),
        "wall_seconds": time.perf_counter() - began,
    })
    tracker.end_run(parent_id, "FINISHED" if outcome.ok else "FAILED")
    return RunResult(
        parent_id, tracker.uri, experiment, outcome, report_dir,
        time.perf_counter() - began, dict(tracking.runs),
    )


def _end_own_runs(tracker: Any, experiment: str, status: str) -> None:
    """End every run this process left RUNNING (an interrupt can land between a run's
    creation and its end, wherever that is)."""
    import os

    for record in tracker.search_runs(experiment, status="RUNNING"):
        if record.tags.get("bayesflow.pid") == str(os.getpid()):
            tracker.set_tags(record.run_id, {"bayesflow.error": "interrupted"})
            tracker.end_run(record.run_id, status)


def _backend(loaded: LoadedSpec, runner: Any) -> Any:
    """The executor the spec's ``execution`` section asks for (inline, processes or Ray)."""
    from bayesflow.dag.executors import make_executor

    return make_executor(loaded.spec.execution, runner)


def _process_tags() -> dict[str, str]:
    import os
    import socket

    return {"bayesflow.pid": str(os.getpid()), "bayesflow.host": socket.gethostname()}


def results(
    run_id: str | None = None,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    tracker: Any = None,
) -> Any:
    """One row per fit of a ``bayesflow run`` as a pandas DataFrame.

    Columns: ``method``, ``engine``, ``temperature``, ``seed``, ``status``, every metric
    (``test_nll``, ``test_accuracy``, ``test_ece``, ``test_brier``, ``fit_seconds``,
    ``steps``, ...), ``run_id`` and ``run_name``.

    Args:
        run_id: the parent run of a ``bayesflow run``; None takes the latest parent run
            of ``experiment``.
        tracking_uri: the MLflow store (default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the cwd).
        experiment: the experiment (workflow name), needed when ``run_id`` is None.
        tracker: a tracker to read from instead (tests).
    """
    import json
    import tempfile

    from bayesflow.hooks import STAGES_ARTIFACT
    from bayesflow.tracking import MlflowTracker, resolve_tracking_uri, results_frame

    if tracker is None:
        uri = resolve_tracking_uri(tracking_uri, Path.cwd())
        tracker = MlflowTracker(uri)
    if run_id is None:
        if experiment is None:
            raise TrackingError("results(): pass run_id, or experiment= to take its latest run")
        parents = tracker.search_runs(experiment, tags={"bayesflow.role": "parent"})
        if not parents:
            raise TrackingError(f"results(): experiment {experiment!r} has no bayesflow runs")
        run_id = max(parents, key=lambda record: record.start_time or 0).run_id
    with tempfile.TemporaryDirectory() as folder:
        path = tracker.download_artifact(run_id, STAGES_ARTIFACT, folder)
        stages = json.loads(Path(path).read_text())
    run_ids = [item["run_id"] for item in stages.values() if item.get("run_id")]
    return results_frame(tracker, run_ids)


def histories(
    run_id: str, key: str = "train_loss", *, tracking_uri: str | None = None, tracker: Any = None
) -> Any:
    """The per-epoch history of ``key`` of every fit of a run, as a long DataFrame.

    Columns: ``method``, ``engine``, ``temperature``, ``seed``, ``run_id``, ``step``, ``value``.
    """
    import pandas as pd

    from bayesflow.tracking import MlflowTracker, resolve_tracking_uri

    if tracker is None:
        tracker = MlflowTracker(resolve_tracking_uri(tracking_uri, Path.cwd()))
    frame = results(run_id, tracker=tracker)
    rows = []
    for record in frame.itertuples():
        for step, value in tracker.get_history(record.run_id, key):
            rows.append({
                "method": record.method, "engine": record.engine, "temperature": record.temperature,
                "seed": record.seed, "run_id": record.run_id, "step": step, "value": value,
            })
    columns = ["method", "engine", "temperature", "seed", "run_id", "step", "value"]
    return pd.DataFrame(rows, columns=columns)


def report(
    run_id: str,
    *,
    tracking_uri: str | None = None,
    output_dir: str | Path | None = None,
    template: str | None = None,
    tracker: Any = None,
) -> Path:
    """Re-render the report of a finished ``bayesflow run`` from its stored results.

    Nothing is refitted: the spec and the fits are read back from the tracking store.
    The report is written to ``<output_dir>/<workflow>/<run_id>/`` (``output_dir``
    defaults to the spec's ``report.output_dir``) and logged to the run again.

    Returns:
        The path of the HTML report.
    """
    import tempfile

    from bayesflow.hooks import report_folder
    from bayesflow.report.render import render_report
    from bayesflow.tracking import MlflowTracker, resolve_tracking_uri

    if tracker is None:
        tracker = MlflowTracker(resolve_tracking_uri(tracking_uri, Path.cwd()))
    with tempfile.TemporaryDirectory() as folder:
        spec_path = tracker.download_artifact(run_id, "spec/resolved.yaml", folder)
        loaded = load_spec(Path(spec_path))
    spec = loaded.spec
    target = report_folder(str(output_dir or spec.report.output_dir), spec.name, run_id)
    parameters = {
        "run_id": run_id, "tracking_uri": tracker.uri, "workflow": spec.name,
        "spec_yaml": loaded.to_yaml(), "plots": list(spec.plots),
    }
    with tempfile.TemporaryDirectory() as folder:
        try:
            check = tracker.download_artifact(run_id, "prior_predictive/prior_predictive.npz", folder)
        except TrackingError:
            check = None
        if check is not None:
            kept = target / "prior_predictive.npz"
            target.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(Path(check).read_bytes())
            parameters["prior_predictive_path"] = str(kept)
        rendered = render_report(template or spec.report.template, parameters, target)
    for path in (rendered.notebook, rendered.html):
        tracker.log_artifact(run_id, path, "report")
    return rendered.html


def _open_tracker(tracking_uri: str | None, tracker: Any) -> Any:
    """``tracker``, or an MLflow tracker on ``tracking_uri`` (default ``./mlflow.db``)."""
    if tracker is not None:
        return tracker
    from bayesflow.tracking import MlflowTracker, resolve_tracking_uri

    return MlflowTracker(resolve_tracking_uri(tracking_uri, Path.cwd()))


def artifacts(
    run_id: str, path: str, *, tracking_uri: str | None = None, tracker: Any = None
) -> dict[str, dict[str, Any]]:
    """The arrays of one ``.npz`` artifact of every fit of a ``bayesflow run``.

    Join the result with :func:`results` on ``run_id`` to know each fit's method,
    temperature and seed::

        frame = bayesflow.results(run_id)
        arrays = bayesflow.artifacts(run_id, "evaluation/evaluation.npz")
        for row in frame.itertuples():
            total = arrays[row.run_id]["uncertainty_total"]

    Args:
        run_id: the parent run of a ``bayesflow run``.
        path: the artifact's path inside each fit run, e.g. ``posterior/posterior.npz``.
        tracking_uri: the MLflow store (default ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the cwd).
        tracker: a tracker to read from instead (tests).

    Returns:
        ``{fit run id: {array name: numpy array}}``; fits without the artifact (failed
        ones) are left out.
    """
    import tempfile

    import numpy as np

    tracker = _open_tracker(tracking_uri, tracker)
    frame = results(run_id, tracker=tracker)
    found: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for fit_id in frame["run_id"]:
            try:
                local = tracker.download_artifact(fit_id, path, Path(folder) / fit_id)
            except TrackingError:
                continue
            with np.load(local) as archive:
                found[fit_id] = {name: archive[name] for name in archive.files}
    return found


def evaluations(
    run_id: str, *, tracking_uri: str | None = None, tracker: Any = None
) -> dict[str, dict[str, Any]]:
    """Every fit's ``evaluation/evaluation.npz`` by fit run id (see :func:`artifacts`):
    per-point ``probabilities``, ``labels``, ``uncertainty_total``,
    ``uncertainty_aleatoric``, ``uncertainty_epistemic`` and their ``ood_`` versions."""
    return artifacts(run_id, "evaluation/evaluation.npz", tracking_uri=tracking_uri, tracker=tracker)


def posteriors(
    run_id: str, *, tracking_uri: str | None = None, tracker: Any = None
) -> dict[str, dict[str, Any]]:
    """Every fit's ``posterior/posterior.npz`` by fit run id (see :func:`artifacts`):
    ``samples`` (S, d), or ``mean`` with ``var`` or ``cov``, and ``param_names``."""
    return artifacts(run_id, "posterior/posterior.npz", tracking_uri=tracking_uri, tracker=tracker)


def run_spec(run_id: str, *, tracking_uri: str | None = None, tracker: Any = None) -> str:
    """The resolved spec (YAML text) a ``bayesflow run`` logged to its parent run."""
    import tempfile

    tracker = _open_tracker(tracking_uri, tracker)
    with tempfile.TemporaryDirectory() as folder:
        return Path(tracker.download_artifact(run_id, "spec/resolved.yaml", folder)).read_text()


def compare(
    run_ids: Sequence[str],
    *,
    tracking_uri: str | None = None,
    output_dir: str | Path = "reports",
    template: str = "compare",
    tracker: Any = None,
) -> Path:
    """Render a comparison report of two or more ``bayesflow run``s of a workflow (for
    example before and after a change of prior): every metric against temperature with
    one line per (run, method), a table of differences to the first run, and how the
    specs differ. Nothing is refitted.

    The report is written to ``<output_dir>/compare/<first run>-<second run>[-...]/``.

    Returns:
        The path of the HTML report.

    Raises:
        TrackingError: fewer than two runs, or a run the store does not hold.
    """
    from bayesflow.report.render import render_report

    runs = list(dict.fromkeys(run_ids))
    if len(runs) < 2:
        raise TrackingError(
            f"compare needs two or more distinct runs, got {len(runs)}; pass the parent run "
            "ids `bayesflow run` printed"
        )
    tracker = _open_tracker(tracking_uri, tracker)
    for run in runs:
        tracker.get_run(run)  # a clear error for an unknown run before the kernel starts
    target = Path(output_dir) / "compare" / "-".join(run[:8] for run in runs)
    parameters = {"run_ids": runs, "tracking_uri": tracker.uri}
    return render_report(template, parameters, target).html

