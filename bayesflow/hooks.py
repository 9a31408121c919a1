"""The tracking hook: logs every stage to MLflow around its run, never inside it.

One parent run per ``bayesflow run``; one child run per fit stage carrying the sweep
coordinates as params (``method``, ``engine``, ``temperature``, ``seed`` and the flattened
method config), the fit's metrics, its loss history, and ``posterior/posterior.npz``. The
evaluate stage adds the test metrics to its fit's run.

Reruns do not duplicate runs: each cached stage remembers its run (a side record in the
cache, and the ``bayesflow.stage_key`` tag in MLflow); a reused fit's run is moved under
the current parent so that the latest parent always holds the complete grid.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.plan import Plan, Stage
from bayesflow.spec.load import LoadedSpec
from bayesflow.stages import (
    EVALUATION_FILE,
    POSTERIOR_FILE,
    PRIOR_PREDICTIVE_FILE,
    describe_error,
    fit_parameters,
)

__all__ = ["STAGES_ARTIFACT", "TrackingHook", "end_stale_runs"]

STAGES_ARTIFACT = "bayesflow/stages.json"
PARENT_TAG = "mlflow.parentRunId"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    """Logs stages to a tracker under one parent run."""

    def __init__(
        self, tracker: Any, loaded: LoadedSpec, plan: Plan, cache: Cache, parent_id: str, experiment: str
    ) -> None:
        self.tracker = tracker
        self.loaded = loaded
        self.plan = plan
        self.cache = cache
        self.parent_id = parent_id
        self.experiment = experiment
        self.runs: dict[str, str] = {}  # fit stage name -> run id
        self.status: dict[str, str] = {}
        self.active: dict[str, str] = {}
        self._published = False

    def _tags(self, stage: Stage) -> dict[str, str]:
        return {
            "bayesflow.workflow": self.plan.workflow,
            "bayesflow.stage": stage.name,
            "bayesflow.stage_key": stage.key,
            "bayesflow.role": "fit",
            "bayesflow.pid": str(os.getpid()),
            "bayesflow.host": socket.gethostname(),
        }

    def _run_name(self, stage: Stage) -> str:
        return stage.name.removeprefix("fit/").replace("/", " ")

    # -------------------------------------------------------------- hook methods

    def before_stage(self, stage: Stage) -> None:
        if stage.kind == "fit":
            run_id = self.tracker.start_run(
                self.experiment, self._run_name(stage), parent_id=self.parent_id,
                params=fit_parameters(self.loaded, stage), tags=self._tags(stage),
            )
            self.active[stage.name] = run_id
            self.runs[stage.name] = run_id
        elif stage.kind in ("plot", "report") and not self._published:
            self.publish_stages()

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None:
        if stage.kind == "fit":
            run_id = self._reuse(stage) if cached else None
            if run_id is None:
                run_id = self.active.pop(stage.name, None) or self._start_for_cached(stage)
                self._log_fit(run_id, entry)
                self.tracker.end_run(run_id, "FINISHED")
                self.cache.write_record(stage.key, "mlflow", {"run_id": run_id})
            self.runs[stage.name] = run_id
            self.status[stage.name] = "FINISHED"
        elif stage.kind == "evaluate":
            self._log_evaluation(stage, entry)
        elif stage.kind == "prior_predictive":
            self.tracker.log_metrics(self.parent_id, entry.values["metrics"])
            self.tracker.log_artifact(self.parent_id, entry.file(PRIOR_PREDICTIVE_FILE), "prior_predictive")
        elif stage.kind == "report":
            for name in ("notebook", "html"):
                self.tracker.log_artifact(self.parent_id, entry.values[name], "report")

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None:
        message = describe_error(error)[:4000]
        if stage.kind == "fit":
            run_id = self.active.pop(stage.name, None)
            if run_id is not None:
                self.tracker.set_tags(run_id, {"bayesflow.error": message})
                self.tracker.log_text(run_id, detail, "error.txt")
                self.tracker.end_run(run_id, "FAILED")
            self.status[stage.name] = "FAILED"
        elif stage.kind == "evaluate":
            run_id = self.runs.get(stage.name.replace("evaluate/", "fit/", 1))
            if run_id is not None:
                self.tracker.set_tags(run_id, {"bayesflow.evaluate_error": message})

    def on_interrupt(self, stage: Stage | None) -> None:
        for run_id in self.active.values():
            self.tracker.set_tags(run_id, {"bayesflow.error": "interrupted"})
            self.tracker.end_run(run_id, "KILLED")
        self.active.clear()

    # ------------------------------------------------------------------ helpers

    def _reuse(self, stage: Stage) -> str | None:
        """The existing run of a cached fit, moved under the current parent."""
        record = self.cache.record(stage.key, "mlflow")
        candidates = [record["run_id"]] if record else []
        candidates += [
            r.run_id for r in self.tracker.search_runs(
                self.experiment, tags={"bayesflow.stage_key": stage.key}, status="FINISHED"
            )
        ]
        for run_id in candidates:
            try:
                run = self.tracker.get_run(run_id)
            except Exception:  # the store was wiped or the run deleted: log a new one  # noqa: BLE001, S112
                continue
            if run.status != "FINISHED":
                continue
            if run.parent_id != self.parent_id:
                self.tracker.set_tags(run_id, {PARENT_TAG: self.parent_id, "bayesflow.reused": "true"})
            self.cache.write_record(stage.key, "mlflow", {"run_id": run_id})
            return run_id
        return None

    def _start_for_cached(self, stage: Stage) -> str:
        return self.tracker.start_run(
            self.experiment, self._run_name(stage), parent_id=self.parent_id,
            params=fit_parameters(self.loaded, stage), tags=self._tags(stage),
        )

    def _log_fit(self, run_id: str, entry: Entry) -> None:
        values = entry.values
        metrics = {"fit_seconds": values["fit_seconds"], "steps": values["steps"]}
        metrics.update(values.get("diagnostics", {}))
        self.tracker.log_metrics(run_id, metrics)
        if values.get("history"):
            self.tracker.log_history(run_id, "train_loss", values["history"])
        for name, trace in values.get("traces", {}).items():
            self.tracker.log_history(run_id, f"trace/{name}", trace)
        self.tracker.log_artifact(run_id, entry.file(POSTERIOR_FILE), "posterior")

    def _log_evaluation(self, stage: Stage, entry: Entry) -> None:
        run_id = self.runs.get(stage.name.replace("evaluate/", "fit/", 1))
        if run_id is None:
            return
        record = self.cache.record(stage.key, "mlflow")
        if record and record.get("run_id") == run_id:
            return  # already logged into this run
        self.tracker.log_metrics(run_id, entry.values["metrics"])
        conventions = entry.values.get("conventions", {})
        self.tracker.set_tags(run_id, {f"convention.{k}": str(v)[:5000] for k, v in conventions.items()})
        if entry.file(EVALUATION_FILE).exists():
            self.tracker.log_artifact(run_id, entry.file(EVALUATION_FILE), "evaluation")
        self.cache.write_record(stage.key, "mlflow", {"run_id": run_id})

    def publish_stages(self) -> None:
        """Log the fit runs of this plan to the parent, for ``bayesflow.results``."""
        payload = {
            name: {"run_id": self.runs.get(name), "status": self.status.get(name, "SKIPPED"),
                   "key": stage.key}
            for name, stage in self.plan.stages.items() if stage.kind == "fit"
        }
        self.tracker.log_text(self.parent_id, json.dumps(payload, indent=1), STAGES_ARTIFACT)
        self._published = True


def report_folder(output_dir: str, workflow: str, run_id: str) -> Path:
    """``reports/<workflow>/<run>/``."""
    return Path(output_dir) / workflow / run_id
