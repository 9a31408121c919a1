"""The tracking hook: MLflow as a sink, written after each stage's artefact exists.

One parent run per ``bayesflow run``; one child run per fit stage, created once the fit's
artefact exists (or it failed), carrying the sweep coordinates as params (``method``,
``engine``, ``temperature``, ``seed`` and the flattened method config, see
:func:`fit_parameters`), the fit's metrics and histories, and ``posterior/posterior.npz``.
The evaluate stage adds its metrics, conventions and ``evaluation/evaluation.npz`` to its
fit's run; the prior predictive check and the report go to the parent.

Each fit run carries its summary metrics (``fit_seconds``, ``steps``, the summary
diagnostics of :data:`~bayesflow.stages.artefacts.SUMMARY_DIAGNOSTICS` and ``flags``,
the number of flags), one tag ``bayesflow.flag.<metric>`` per flag
(:mod:`bayesflow.evaluate.flags`), and every per-tensor diagnostic as one table,
``diagnostics/diagnostics.json`` (``mlflow.log_table``'s form).

Reruns compute nothing again and keep every parent whole: a cached fit gets a new child
run under the current parent with the same params and metrics (of each per-epoch series
its last value; the readers take the series from the source run), tagged
``bayesflow.reused=true`` and ``bayesflow.computed_by=<id>`` of the run that computed it
(the latest finished run of the same stage name and key that was not itself reused,
found with one search; ``bayesflow.artifact_uri`` is its artifact location). Its
artifacts are not copied: the trackers' ``download_artifact`` follows
``bayesflow.computed_by`` (so ``bayesflow.posteriors`` and ``load_posterior`` work on
it), and earlier parents keep their children. Two methods with equal settings under
different names share one cache entry but each keeps its own run. Nothing here is read
back to compute a stage.
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
from typing import Any

from bayesflow.dag.cache import Entry
from bayesflow.dag.plan import Plan, Stage
from bayesflow.spec.load import LoadedSpec
from bayesflow.stages.artefacts import (
    EvaluationArtefact,
    FitArtefact,
    PriorPredictiveArtefact,
    ReportArtefact,
)
from bayesflow.stages.context import describe_error
from bayesflow.tracking.base import COMPUTED_BY_TAG, FLAG_TAG, STAGES_ARTIFACT, RunRecord

__all__ = ["DIAGNOSTICS_ARTIFACT", "STAGES_ARTIFACT", "TrackingHook", "end_stale_runs", "fit_parameters"]

# Every diagnostic of a fit, per tensor, as one table (FitArtefact.diagnostics_table).
DIAGNOSTICS_ARTIFACT = "diagnostics/diagnostics.json"

# MLflow keeps tag values up to 5,000 characters (its MAX_TAG_VAL_LENGTH is 8,000; the
# margin leaves room for multi-byte characters).
TAG_LIMIT = 5000
ERROR_LIMIT = 4000


def fit_parameters(loaded: LoadedSpec, stage: Stage) -> dict[str, Any]:
    """The MLflow params of a fit: the sweep coordinates plus the flattened method config."""
    spec = loaded.spec
    method = spec.methods[stage.method or ""]
    params: dict[str, Any] = {
        "method": stage.method,
        "engine": stage.engine,
        "temperature": 0.0 if stage.temperature is None else stage.temperature,
        "temperature_shared": stage.temperature is None,
        "seed": stage.seed,
        "temperature_convention": spec.temperature_convention,
        "model": spec.model.name,
        "likelihood": spec.likelihood.name,
        "prior": spec.prior.name,
        "dataset": spec.data.name,
    }
    flat = _flatten(method.model_dump(mode="json", by_alias=True), "")
    params.update({key: value for key, value in flat.items() if key != "engine"})
    if spec.prior.name == "diag_normal":
        params["prior_variance"] = spec.prior.variance
    if stage.temperature:  # MLflow plots params on a linear axis; temperatures span decades
        params["log10_temperature"] = math.log10(stage.temperature)
    # Every key that defines the cell, e.g. `model.hidden`, `prior.variance`, `data.split_seed`.
    for section in ("model", "likelihood", "prior", "data"):
        block = getattr(spec, section).model_dump(mode="json", by_alias=True)
        params.update(_flatten({key: value for key, value in block.items() if key != "name"}, f"{section}."))
    # A sweep's swept keys under their spec names (`methods.sghmc.lr`), from the variant's spec.
    params.update({key: _at(spec, key) for key, _ in stage.swept if key not in params})
    # Fitted as one cell of a vectorised grid (execution.vectorize, a fit_group stage).
    params["vectorized"] = bool(stage.config.get("vectorized", False))
    # An unset setting is `null`, as the spec writes it, never Python's 'None'.
    return {key: "null" if value is None else value for key, value in params.items()}


def _at(spec: Any, key: str) -> Any:
    """The value at a dotted ``key`` of a validated spec, as the spec writes it."""
    value: Any = spec.model_dump(mode="json", by_alias=True)
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def _flatten(mapping: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_tags() -> dict[str, str]:
    """The tags that say which process of which host wrote a run (see :func:`end_stale_runs`),
    with MLflow's standard system tags (user, source, git commit) and bayesflow's version."""
    return {"bayesflow.pid": str(os.getpid()), "bayesflow.host": socket.gethostname(), **_system_tags()}


@functools.lru_cache(maxsize=1)
def _system_tags() -> dict[str, str]:
    """``mlflow.user``, ``mlflow.source.*`` and ``bayesflow.version``: what the MLflow UI
    shows for a run started by MLflow's own fluent API, read once per process."""
    import getpass
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version

    try:
        bayesflow_version = version("bayesflow-workflows")
    except PackageNotFoundError:
        bayesflow_version = "unknown"
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        user = str(os.getuid())
    tags = {
        "mlflow.user": user,
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": " ".join(["bayesflow", *sys.argv[1:]])[:500] or "bayesflow",
        "bayesflow.version": bayesflow_version,
    }
    try:  # the commit of a checkout bayesflow runs from (an installed wheel has none)
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=os.path.dirname(__file__), capture_output=True,
            text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if commit:
        tags["mlflow.source.git.commit"] = commit
    return tags


def end_stale_runs(tracker: Any, experiment: str) -> list[str]:
    """Mark runs of ``experiment`` left RUNNING by a killed process as KILLED."""
    ended = []
    host = socket.gethostname()
    for record in tracker.search_runs(experiment, status="RUNNING"):
        tags = record.tags
        if "bayesflow.pid" not in tags:
            continue
        same_host = tags.get("bayesflow.host") == host
        if same_host and _process_alive(int(tags["bayesflow.pid"])):
            continue
        tracker.set_tags(record.run_id, {"bayesflow.ended_by": "a later run found it interrupted"})
        tracker.end_run(record.run_id, "KILLED")
        ended.append(record.run_id)
    return ended


class TrackingHook:
    """Logs stages' artefacts to a tracker under one parent run, after they exist.

    Attributes:
        runs: fit stage name → its run id in this execution (a reused fit's once its
            evaluation is logged, or at :meth:`publish_stages`).
        status: fit stage name → ``FINISHED`` or ``FAILED``.
    """

    def __init__(
        self, tracker: Any, loaded: LoadedSpec, plan: Plan, parent_id: str, experiment: str,
        variants: dict[str, LoadedSpec] | None = None, process: dict[str, str] | None = None,
        sizes: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """``variants``: a sweep's specs by variant label (a stage's params and model come
        from its variant's spec); ``process``: the :func:`process_tags` of the process that
        runs the stages (default: this one's; the tracking worker is given its owner's);
        ``sizes``: the loaded data's :func:`~bayesflow.posterior.dataset_sizes` by variant
        label (``""``: the spec's own data), which a fit's pyfunc model records; without
        them the model's logger loads the data (and a language model's tokenizer) itself."""
        self.tracker = tracker
        self.sizes = sizes or {}
        self.process = process or process_tags()
        self.loaded = loaded
        self.variants = variants or {}
        self.plan = plan
        self.parent_id = parent_id
        self.experiment = experiment
        self.runs: dict[str, str] = {}
        self.status: dict[str, str] = {}
        self.reused: dict[str, RunRecord] = {}  # fit stage name -> the earlier run it reuses
        # A reused fit's run waits for its evaluation, to be created with one batch:
        # fit stage name -> (stage, tags, metrics).
        self._pending: dict[str, tuple[Stage, dict[str, str], dict[str, float]]] = {}
        self._finished: dict[tuple[str, str], RunRecord] | None = None

    def _loaded(self, stage: Stage) -> LoadedSpec:
        """The spec of ``stage``: its variant's in a sweep."""
        return self.variants.get(stage.variant, self.loaded)

    def _tags(self, stage: Stage) -> dict[str, str]:
        variant = {"bayesflow.variant": stage.variant, "bayesflow.swept": json.dumps(dict(stage.swept))}
        return {
            "bayesflow.workflow": self.plan.workflow,
            "bayesflow.stage": stage.name,
            "bayesflow.stage_key": stage.key,
            "bayesflow.role": "fit",
            **(variant if stage.swept else {}),
            **self.process,
        }

    def _start(
        self, stage: Stage, tags: dict[str, str] | None = None, metrics: dict[str, float] | None = None,
        histories: dict[str, list[float]] | None = None,
    ) -> str:
        """Start the run of a fit stage; its ``histories`` go with the params where the
        tracker takes them (``start_run_takes_histories``), else in a batch of their own."""
        together = histories and getattr(self.tracker, "start_run_takes_histories", False) is True
        run_id = str(self.tracker.start_run(
            self.experiment, stage.name.removeprefix("fit/").replace("/", " "),
            parent_id=self.parent_id, params=fit_parameters(self._loaded(stage), stage),
            tags={**self._tags(stage), **(tags or {})}, metrics=metrics,
            **({"histories": histories} if together else {}),
        ))
        if histories and not together:
            self.tracker.log_batch(run_id, histories=histories)
        return run_id

    # -------------------------------------------------------------- hook methods

    def before_stage(self, stage: Stage) -> None:
        """Nothing is written before a stage's artefact exists."""

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None:
        """Log the artefact of a finished (or reused) stage."""
        if stage.kind == "fit":
            self._log_fit(stage, FitArtefact.from_entry(entry), cached)
        elif stage.kind == "evaluate":
            self._log_evaluation(stage, EvaluationArtefact.from_entry(entry))
        elif stage.kind == "prior_predictive":
            check = PriorPredictiveArtefact.from_entry(entry)
            self.tracker.log_batch(self.parent_id, metrics=check.metrics)
            self.tracker.log_artifact(self.parent_id, check.file, "prior_predictive")
        elif stage.kind == "report":
            rendered = ReportArtefact.from_entry(entry)
            for path in (rendered.notebook, rendered.html):
                self.tracker.log_artifact(self.parent_id, path, "report")

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None:
        """A failed fit gets a FAILED run with its error; a failed evaluation tags its fit's run."""
        message = describe_error(error)[:ERROR_LIMIT]
        if stage.kind == "fit":
            run_id = self._start(stage, {"bayesflow.error": message})
            self.tracker.log_text(run_id, detail, "error.txt")
            self.tracker.end_run(run_id, "FAILED")
            self.runs[stage.name] = run_id
            self.status[stage.name] = "FAILED"
        elif stage.kind == "evaluate":
            fit_name = stage.name.replace("evaluate/", "fit/", 1)
            if fit_name in self._pending:
                self._create_reused(fit_name, {"bayesflow.evaluate_error": message})
                return
            fit_run = self.runs.get(fit_name)
            if fit_run is not None:
                self.tracker.set_tags(fit_run, {"bayesflow.evaluate_error": message})

    def on_interrupt(self, stage: Stage | None) -> None:
        """Every run this hook starts is ended before it returns: nothing is left open."""

    # ------------------------------------------------------------------ helpers

    def _log_fit(self, stage: Stage, fit: FitArtefact, cached: bool) -> None:
        """A child run with the fit's metrics, flags, histories and artifacts; for a fit
        an earlier run computed, the tags and metrics of a run that points to that run's
        artifacts, created with its evaluation's (:meth:`_create_reused`)."""
        from bayesflow.stages.table import fit_flags_of

        flags = fit_flags_of(fit, stage.engine)
        tags = {FLAG_TAG.format(metric=metric): message[:TAG_LIMIT] for metric, message in flags.items()}
        metrics = {**fit.metrics(), "flags": float(len(flags))}
        source = self._earlier_run(stage) if cached else None
        table = fit.diagnostics_table()
        if source is not None:  # the series' last values; readers take the series from the source
            self.reused[stage.name] = source
            tags.update({"bayesflow.reused": "true", COMPUTED_BY_TAG: source.run_id,
                         "bayesflow.artifact_uri": source.artifact_uri})
            metrics.update({key: values[-1] for key, values in fit.series().items() if values})
            self._pending[stage.name] = (stage, tags, metrics)
            self.status[stage.name] = "FINISHED"
            return
        if table["data"]:  # MLflow's UI shows a logged table as one
            tags["mlflow.loggedArtifacts"] = json.dumps([{"path": DIAGNOSTICS_ARTIFACT, "type": "table"}])
        run_id = self._start(stage, tags, metrics, fit.series())
        self.tracker.log_artifact(run_id, fit.posterior, "posterior")
        if table["data"]:
            self.tracker.log_text(run_id, json.dumps(table), DIAGNOSTICS_ARTIFACT)
        self._log_model(stage, run_id, fit)
        self.tracker.end_run(run_id, "FINISHED")
        self.runs[stage.name] = run_id
        self.status[stage.name] = "FINISHED"

    def _log_model(self, stage: Stage, run_id: str, fit: FitArtefact) -> None:
        """The fit as an MLflow pyfunc model (``runs:/<id>/model``), for MLflow stores only
        (a tracker whose ``uri`` names one; a wrapper of an ``MlflowTracker`` too):
        ``mlflow.pyfunc.load_model(...).predict(features)`` gives its posterior predictive.
        The model family says what else its posterior folder holds (a language model's
        ``base_model.json``) and which pyfunc model it logs (:mod:`bayesflow.families`)."""
        from bayesflow.families import family_of

        loaded = self._loaded(stage)
        family = family_of(loaded.spec)
        for name, text in family.implementation().posterior_files(loaded.spec, loaded.base_dir).items():
            self.tracker.log_text(run_id, text, f"posterior/{name}")
        uri = getattr(self.tracker, "uri", None)
        if not isinstance(uri, str) or uri.startswith("memory:"):
            return
        log = family.pyfunc_logger()
        cell = {**fit_parameters(loaded, stage), **self.sizes.get(stage.variant, self.sizes.get("", {}))}
        log(run_id, fit.posterior, loaded.to_yaml(), cell, uri, base_dir=loaded.base_dir)

    def _earlier_run(self, stage: Stage) -> RunRecord | None:
        """The latest finished run that computed this stage name and key (not one that
        reused it), from one search of the workflow's finished fit runs (done at the
        first cached fit)."""
        if self._finished is None:
            found = self.tracker.search_runs(
                self.experiment, tags={"bayesflow.role": "fit", "bayesflow.workflow": self.plan.workflow},
                status="FINISHED",
            )
            # Oldest first: a later run of the same stage and key replaces an earlier one.
            self._finished = {
                (record.tags.get("bayesflow.stage", ""), record.tags.get("bayesflow.stage_key", "")): record
                for record in found if COMPUTED_BY_TAG not in record.tags
            }
        return self._finished.get((stage.name, stage.key))

    def _create_reused(
        self, fit_name: str, tags: dict[str, str] | None = None, metrics: dict[str, float] | None = None
    ) -> str:
        """Create the finished run of a reused fit with its evaluation's tags and metrics:
        the run, then its params and every metric in one batch."""
        stage, fit_tags, fit_metrics = self._pending.pop(fit_name)
        run_id = self._start(stage, {**fit_tags, **(tags or {})}, {**fit_metrics, **(metrics or {})})
        self.tracker.end_run(run_id, "FINISHED")
        self.runs[fit_name] = run_id
        return run_id

    def _log_evaluation(self, stage: Stage, evaluation: EvaluationArtefact) -> None:
        fit_name = stage.name.replace("evaluate/", "fit/", 1)
        tags = {f"convention.{key}": str(value)[:TAG_LIMIT] for key, value in evaluation.conventions.items()}
        tags["bayesflow.evaluation_key"] = stage.key
        if fit_name in self._pending:
            run_id = self._create_reused(fit_name, tags, evaluation.metrics)
        elif fit_name in self.runs:
            run_id = self.runs[fit_name]
            self.tracker.log_batch(run_id, metrics=evaluation.metrics, tags=tags)
        else:
            return
        source = self.reused.get(fit_name)
        if source is not None and source.tags.get("bayesflow.evaluation_key") == stage.key:
            return  # the run that computed the fit holds this evaluation's arrays
        if evaluation.file is not None:
            self.tracker.log_artifact(run_id, evaluation.file, "evaluation")

    def publish_stages(self) -> None:
        """Log which run holds each fit of this plan to the parent (``bayesflow/stages.json``,
        read by :func:`bayesflow.results`); first create the runs of reused fits whose
        evaluation did not come."""
        for name in list(self._pending):
            self._create_reused(name)
        payload = {
            name: {"run_id": self.runs.get(name), "status": self.status.get(name, "SKIPPED"),
                   "key": stage.key}
            for name, stage in self.plan.stages.items() if stage.kind == "fit"
        }
        self.tracker.log_text(self.parent_id, json.dumps(payload, indent=1), STAGES_ARTIFACT)
