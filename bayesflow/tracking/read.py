"""Reading finished ``bayesflow run``s back from the tracking store, for people.

These are the readers a notebook uses (``bayesflow.results``, ``histories``,
``artifacts``, ``evaluations``, ``posteriors``, ``run_spec``, ``compare``) and the bundle
``bayesflow report RUN`` renders from (:func:`write_bundle`). No stage calls them: stages
compute from their upstream artefacts, and the store is only written to.

Each reader takes ``tracking_uri`` (default ``$MLFLOW_TRACKING_URI``, else
``sqlite:///mlflow.db`` in the working directory) or a ``tracker`` to read from instead
(tests).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.errors import TrackingError
from bayesflow.tracking.base import COMPUTED_BY_TAG, FLAG_TAG, STAGES_ARTIFACT, RunRecord

if TYPE_CHECKING:
    import pandas

__all__ = [
    "artifacts", "compare", "evaluations", "histories", "open_tracker", "posteriors",
    "results", "run_spec", "write_bundle",
]

POSTERIOR_ARTIFACT = "posterior/posterior.npz"
EVALUATION_ARTIFACT = "evaluation/evaluation.npz"
PRIOR_PREDICTIVE_ARTIFACT = "prior_predictive/prior_predictive.npz"


def open_tracker(tracking_uri: str | None = None, tracker: Any = None) -> Any:
    """``tracker``, or an MLflow tracker on ``tracking_uri`` (default
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the working directory).

    Reading needs a store that exists: a SQLite file that is not there is a TrackingError
    (MLflow would create an empty store there and then call every run unknown).
    """
    if tracker is not None:
        return tracker
    from bayesflow.tracking import MlflowTracker
    from bayesflow.tracking.uri import missing_store, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri, Path.cwd())
    if missing_store(uri):
        raise TrackingError(
            f"no MLflow store at {uri}: nothing has been run with it; run from the folder "
            "holding mlflow.db, or pass --tracking-uri (tracking_uri=) or set MLFLOW_TRACKING_URI"
        )
    return MlflowTracker(uri)


def _latest_parent(tracker: Any, experiment: str | None) -> str:
    if experiment is None:
        raise TrackingError("results(): pass run_id, or experiment= to take its latest run")
    parents = tracker.search_runs(experiment, tags={"bayesflow.role": "parent"})
    if not parents:
        raise TrackingError(f"results(): experiment {experiment!r} has no bayesflow runs")
    return str(max(parents, key=lambda record: record.start_time or 0).run_id)


def _fit_records(tracker: Any, run_id: str) -> list[RunRecord]:
    """The fit runs a parent run lists in its ``bayesflow/stages.json``."""
    with tempfile.TemporaryDirectory() as folder:
        path = tracker.download_artifact(run_id, STAGES_ARTIFACT, folder)
        stages = json.loads(Path(path).read_text())
    return [tracker.get_run(item["run_id"]) for item in stages.values() if item.get("run_id")]


def results(
    run_id: str | None = None,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    tracker: Any = None,
) -> pandas.DataFrame:
    """One row per fit of a ``bayesflow run`` as a pandas DataFrame.

    Columns: ``method``, ``engine``, ``temperature``, ``seed``, ``status``, every metric
    (``test_nll``, ``test_accuracy``, ``test_ece``, ``test_brier``, ``fit_seconds``,
    ``steps``, ``flags``, ...), ``flag/<metric>`` for each metric some fit is flagged on
    (the flag's message, "" for the others), ``run_id`` and ``run_name``. A run that
    reused an earlier run's fit (``bayesflow.computed_by``) has that run's numbers.

    Args:
        run_id: the parent run of a ``bayesflow run``; None takes the latest parent run
            of ``experiment``.
        tracking_uri: the MLflow store (default ``$MLFLOW_TRACKING_URI``, else
            ``sqlite:///mlflow.db`` in the cwd).
        experiment: the experiment (workflow name), needed when ``run_id`` is None.
        tracker: a tracker to read from instead (tests).
    """
    from bayesflow.tracking import records_frame

    tracker = open_tracker(tracking_uri, tracker)
    parent = run_id if run_id is not None else _latest_parent(tracker, experiment)
    records = _fit_records(tracker, parent)
    return _with_flags(records_frame(records), records)


def _history(tracker: Any, record: RunRecord, key: str) -> list[tuple[int, float]]:
    """Every ``(step, value)`` of ``key`` in a fit run; a per-epoch series of the fit
    (``train_loss``, ``trace/<name>``) of a run that reused an earlier fit comes from the
    run that computed it (``bayesflow.computed_by``), which holds the whole series."""
    source = record.tags.get(COMPUTED_BY_TAG)
    series = key == "train_loss" or key.startswith("trace/")
    return list(tracker.get_history(source if source and series else record.run_id, key))


def _with_flags(frame: pandas.DataFrame, records: list[RunRecord]) -> pandas.DataFrame:
    """``frame`` with a string column ``flag/<metric>`` (the results table's name) before
    ``run_id`` for each ``bayesflow.flag.<metric>`` tag of any record, "" where absent."""
    from bayesflow.stages.table import FLAG_COLUMN

    prefix = FLAG_TAG.format(metric="")
    tags = {record.run_id: record.tags for record in records}
    metrics = sorted({key.removeprefix(prefix) for record in records for key in record.tags if key.startswith(prefix)})
    position = int(frame.columns.get_loc("run_id"))
    for offset, metric in enumerate(metrics):
        messages = [tags[run].get(prefix + metric, "") for run in frame["run_id"]]
        frame.insert(position + offset, FLAG_COLUMN.format(metric=metric), messages)
    return frame


def histories(
    run_id: str, key: str = "train_loss", *, tracking_uri: str | None = None, tracker: Any = None
) -> pandas.DataFrame:
    """The per-epoch history of ``key`` of every fit of a run, as a long DataFrame.

    Columns: ``method``, ``engine``, ``temperature``, ``seed``, ``run_id``, ``step``, ``value``.
    """
    import pandas as pd

    tracker = open_tracker(tracking_uri, tracker)
    records = {record.run_id: record for record in _fit_records(tracker, run_id)}
    frame = results(run_id, tracker=tracker)
    rows = []
    for record in frame.itertuples():
        for step, value in _history(tracker, records[record.run_id], key):
            rows.append({
                "method": record.method, "engine": record.engine, "temperature": record.temperature,
                "seed": record.seed, "run_id": record.run_id, "step": step, "value": value,
            })
    columns = ["method", "engine", "temperature", "seed", "run_id", "step", "value"]
    return pd.DataFrame(rows, columns=columns)


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
        tracking_uri: the MLflow store (default ``$MLFLOW_TRACKING_URI``, else
            ``sqlite:///mlflow.db`` in the cwd).
        tracker: a tracker to read from instead (tests).

    Returns:
        ``{fit run id: {array name: numpy array}}``; fits without the artifact (failed
        ones) are left out.
    """
    import numpy as np

    tracker = open_tracker(tracking_uri, tracker)
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
    return artifacts(run_id, EVALUATION_ARTIFACT, tracking_uri=tracking_uri, tracker=tracker)


def posteriors(
    run_id: str, *, tracking_uri: str | None = None, tracker: Any = None
) -> dict[str, dict[str, Any]]:
    """Every fit's ``posterior/posterior.npz`` by fit run id (see :func:`artifacts`):
    ``samples`` (S, d), or ``mean`` with ``var`` or ``cov``, and ``param_names``."""
    return artifacts(run_id, POSTERIOR_ARTIFACT, tracking_uri=tracking_uri, tracker=tracker)


def run_spec(run_id: str, *, tracking_uri: str | None = None, tracker: Any = None) -> str:
    """The resolved spec (YAML text) a ``bayesflow run`` logged to its parent run."""
    tracker = open_tracker(tracking_uri, tracker)
    with tempfile.TemporaryDirectory() as folder:
        return Path(tracker.download_artifact(run_id, "spec/resolved.yaml", folder)).read_text()


def write_bundle(run_id: str, folder: Path, tracker: Any) -> Path:
    """Write the report bundle (:mod:`bayesflow.report.bundle`) of a finished run from the
    store: what the report stage wrote from the run's artefacts, plus each fit's ``run_id``
    and ``run_name`` and the parent run's id.

    A cell whose fit finished but whose evaluation failed is ``FAILED`` with the error the
    run was tagged with, as the report stage reports it.
    """
    from bayesflow.report import bundle
    from bayesflow.tracking import records_frame

    records = _fit_records(tracker, run_id)
    frame = _with_flags(records_frame(records), records)
    by_id = {record.run_id: record for record in records}
    tags = [by_id[run].tags for run in frame["run_id"]]
    params = [by_id[run].params for run in frame["run_id"]]
    frame.insert(3, "temperature_shared", [p.get("temperature_shared") == "True" for p in params])
    frame["cell"] = [tag.get("bayesflow.stage") or run for tag, run in zip(tags, frame["run_id"])]
    frame["error"] = [tag.get("bayesflow.error") or tag.get("bayesflow.evaluate_error") or "" for tag in tags]
    failed_evaluation = [bool(tag.get("bayesflow.evaluate_error")) for tag in tags]
    frame.loc[failed_evaluation, "status"] = "FAILED"
    with tempfile.TemporaryDirectory() as scratch:
        downloads = Path(scratch)
        series: dict[str, dict[str, list[tuple[int, float]]]] = {}
        files: dict[str, dict[str, Path]] = {"posterior": {}, "evaluation": {}}
        for record, cell in zip((by_id[run] for run in frame["run_id"]), frame["cell"]):
            keys = [key for key in record.metrics if key == "train_loss" or key.startswith("trace/")]
            series[cell] = {key: _history(tracker, record, key) for key in keys}
            for kind, artifact in (("posterior", POSTERIOR_ARTIFACT), ("evaluation", EVALUATION_ARTIFACT)):
                try:
                    files[kind][cell] = tracker.download_artifact(
                        record.run_id, artifact, downloads / record.run_id
                    )
                except TrackingError:  # a failed fit, an evaluation without arrays
                    continue
        try:
            check = tracker.download_artifact(run_id, PRIOR_PREDICTIVE_ARTIFACT, downloads / run_id)
        except TrackingError:
            check = None
        return bundle.write(
            folder, frame, series, files["posterior"], files["evaluation"], check,
            about={"parent_run_ids": [run_id]},
        )


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
    tracker = open_tracker(tracking_uri, tracker)
    for run in runs:
        tracker.get_run(run)  # a clear error for an unknown run before the kernel starts
    target = Path(output_dir) / "compare" / "-".join(run[:8] for run in runs)
    parameters = {"run_ids": runs, "tracking_uri": tracker.uri}
    return render_report(template, parameters, target).html
