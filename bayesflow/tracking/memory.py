"""An in-memory tracker: the test double of :class:`~bayesflow.tracking.MlflowTracker`.

It keeps runs in dicts and copies artifacts into a temporary folder, so the layers
above can be unit-tested without MLflow. Its behaviour is held to the MLflow tracker's
by one shared test suite (``tests/tracking/test_trackers.py``).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bayesflow.errors import TrackingError
from bayesflow.tracking.base import (
    COMPUTED_BY_TAG,
    MAX_LINKS,
    PARENT_TAG,
    RUN_NAME_TAG,
    RunRecord,
    check_status,
    stringify_params,
)

__all__ = ["InMemoryTracker"]


class InMemoryTracker:
    """A tracker that keeps everything in this process.

    Args:
        artifact_root: folder that receives artifacts; a fresh temporary folder if not given.

    Attributes:
        uri: ``"memory://"``.
    """

    def __init__(self, artifact_root: str | Path | None = None) -> None:
        self.uri = "memory://"
        root = artifact_root if artifact_root is not None else tempfile.mkdtemp(prefix="bayesflow-")
        self.artifact_root = Path(root)
        self._runs: dict[str, RunRecord] = {}
        # run id -> metric key -> [(step, timestamp in ms, value)] in logging order.
        self._histories: dict[str, dict[str, list[tuple[int, int, float]]]] = {}

    def _record(self, run_id: str) -> RunRecord:
        try:
            return self._runs[run_id]
        except KeyError:
            raise TrackingError(
                f"no run {run_id!r} in the tracking store {self.uri}: check the run id "
                "(runs of this in-memory store live only as long as the tracker)"
            ) from None

    def _artifact_dir(self, run_id: str) -> Path:
        return self.artifact_root / run_id / "artifacts"

    def start_run(
        self,
        experiment: str,
        run_name: str,
        *,
        parent_id: str | None = None,
        params: dict[str, Any] | None = None,
        tags: dict[str, str] | None = None,
        metrics: dict[str, float] | None = None,
    ) -> str:
        """Create a run; see :meth:`bayesflow.tracking.Tracker.start_run`."""
        if parent_id is not None:
            self._record(parent_id)
        run_id = uuid.uuid4().hex
        all_tags = {**(tags or {}), RUN_NAME_TAG: run_name}
        if parent_id is not None:
            all_tags[PARENT_TAG] = parent_id
        self._artifact_dir(run_id).mkdir(parents=True)
        self._runs[run_id] = RunRecord(
            run_id=run_id,
            experiment=experiment,
            run_name=run_name,
            parent_id=parent_id,
            status="RUNNING",
            params=stringify_params(params),
            tags=all_tags,
            artifact_uri=self._artifact_dir(run_id).resolve().as_uri(),
            start_time=time.time(),
        )
        self._histories[run_id] = {}
        if metrics:
            self.log_metrics(run_id, metrics)
        return run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        """Log metrics at one step; see :meth:`bayesflow.tracking.Tracker.log_metrics`."""
        self._record(run_id)
        timestamp = int(time.time() * 1000)
        for key, value in metrics.items():
            self._append(run_id, key, [(step or 0, timestamp, float(value))])

    def log_history(
        self, run_id: str, key: str, values: Sequence[float], steps: Sequence[int] | None = None
    ) -> None:
        """Log a metric history; see :meth:`bayesflow.tracking.Tracker.log_history`."""
        self._record(run_id)
        steps = list(range(len(values))) if steps is None else list(steps)
        if len(steps) != len(values):
            raise TrackingError(
                f"history {key!r} of run {run_id}: expected as many steps as values, got "
                f"{len(steps)} steps and {len(values)} values"
            )
        timestamp = int(time.time() * 1000)
        self._append(run_id, key, [(int(s), timestamp, float(v)) for s, v in zip(steps, values)])

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: dict[str, float] | None = None,
        histories: dict[str, Sequence[float]] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Log metrics, histories and tags; see :meth:`bayesflow.tracking.Tracker.log_batch`."""
        self._record(run_id)
        if metrics:
            self.log_metrics(run_id, metrics)
        for key, values in (histories or {}).items():
            self.log_history(run_id, key, values)
        if tags:
            self.set_tags(run_id, tags)

    def _append(self, run_id: str, key: str, points: list[tuple[int, int, float]]) -> None:
        history = self._histories[run_id].setdefault(key, [])
        history.extend(points)
        # MLflow's "latest" value is the one with the largest (step, timestamp, value).
        self._runs[run_id].metrics[key] = max(history)[2]

    def get_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """Every ``(step, value)`` of a metric, ordered by step."""
        self._record(run_id)
        points = self._histories[run_id].get(key, [])
        return [(step, value) for step, _, value in sorted(points, key=lambda point: point[0])]

    def log_artifact(
        self, run_id: str, local_path: str | Path, artifact_path: str | None = None
    ) -> None:
        """Copy a local file into the run's artifact folder."""
        self._record(run_id)
        source = Path(local_path)
        if not source.is_file():
            raise TrackingError(
                f"cannot log artifact {str(source)!r} of run {run_id}: no such file; "
                "write the file before logging it"
            )
        target = self._artifact_dir(run_id) / (artifact_path or "")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / source.name)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Write text as an artifact file of the run."""
        self._record(run_id)
        target = self._artifact_dir(run_id) / artifact_file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        """End a run with ``FINISHED``, ``FAILED`` or ``KILLED``."""
        record = self._record(run_id)
        record.status = check_status(status)
        record.end_time = time.time()

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set tags of a run (values stringified); ``mlflow.parentRunId`` moves it under
        another parent, as in MLflow."""
        record = self._record(run_id)
        record.tags.update({key: str(value) for key, value in tags.items()})
        if PARENT_TAG in tags:
            record.parent_id = str(tags[PARENT_TAG])

    def get_run(self, run_id: str) -> RunRecord:
        """A copy of the run's record."""
        record = self._record(run_id)
        return replace(
            record,
            params=dict(record.params),
            metrics=dict(record.metrics),
            tags=dict(record.tags),
        )

    def search_runs(
        self,
        experiment: str,
        tags: dict[str, str] | None = None,
        parent_id: str | None = None,
        status: str | None = None,
    ) -> list[RunRecord]:
        """Runs of an experiment matching every filter, oldest first."""
        found = [
            self.get_run(run_id)
            for run_id, record in self._runs.items()
            if record.experiment == experiment
            and all(record.tags.get(key) == str(value) for key, value in (tags or {}).items())
            and (parent_id is None or record.parent_id == parent_id)
            and (status is None or record.status == status)
        ]
        return sorted(found, key=lambda record: record.start_time or 0.0)

    def download_artifact(self, run_id: str, artifact_path: str, dst_dir: str | Path) -> Path:
        """Copy one artifact file or folder into ``dst_dir``; return its local path (a
        reused run's source's when it has none: ``bayesflow.computed_by``)."""
        holder = run_id
        source = self._artifact_dir(holder) / artifact_path
        for _ in range(MAX_LINKS):
            link = self._record(holder).tags.get(COMPUTED_BY_TAG)
            if source.exists() or link is None:
                break
            holder = link
            source = self._artifact_dir(holder) / artifact_path
        if not source.exists():
            raise TrackingError(
                f"run {run_id} has no artifact {artifact_path!r}; list the run's artifacts "
                "to find the right path"
            )
        destination = Path(dst_dir) / artifact_path
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination, dirs_exist_ok=True)
        else:
            shutil.copy2(source, destination)
        return destination

    def run_url(self, run_id: str) -> str:
        """``runs:/<run id>``, the same form the MLflow tracker gives for a local store."""
        self._record(run_id)
        return f"runs:/{run_id}"
