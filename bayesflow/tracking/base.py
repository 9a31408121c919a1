"""What every tracker shares: the :class:`Tracker` protocol and the :class:`RunRecord` it returns.

Two implementations behave identically (one test suite runs against both):
:class:`~bayesflow.tracking.mlflow_tracker.MlflowTracker` over a real MLflow store, and
:class:`~bayesflow.tracking.memory.InMemoryTracker`, a test double that keeps runs in dicts.
Parent and child runs are linked by the ``mlflow.parentRunId`` tag and a run's name is the
``mlflow.runName`` tag, as MLflow's UI expects. A run tagged ``bayesflow.computed_by``
reuses the artifacts of the run it names: ``download_artifact`` gives that run's artifact
for a path the run itself lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bayesflow.errors import TrackingError

__all__ = [
    "COMPUTED_BY_TAG",
    "FLAG_TAG",
    "PARENT_TAG",
    "RUN_NAME_TAG",
    "RUN_STATUSES",
    "STAGES_ARTIFACT",
    "RunRecord",
    "Tracker",
    "check_status",
    "stringify_params",
]

PARENT_TAG = "mlflow.parentRunId"
# The tag of a flag on ``metric`` of a fit run (bayesflow.evaluate.flags), its message.
FLAG_TAG = "bayesflow.flag.{metric}"
# The run whose artifacts a reused fit run points to (it holds none of its own).
COMPUTED_BY_TAG = "bayesflow.computed_by"
# How many bayesflow.computed_by links download_artifact follows (a guard against a loop).
MAX_LINKS = 8
# The parent run's record of which run holds each fit stage of its plan.
STAGES_ARTIFACT = "bayesflow/stages.json"
RUN_NAME_TAG = "mlflow.runName"
# The statuses a run can end with; a run is "RUNNING" until then.
RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")


@dataclass
class RunRecord:
    """One run as the tracking store holds it.

    Attributes:
        run_id: the store's id of the run.
        experiment: the experiment's name.
        run_name: the run's name (``mlflow.runName``).
        parent_id: the parent run's id, ``None`` for a top-level run.
        status: ``RUNNING``, ``FINISHED``, ``FAILED`` or ``KILLED``.
        params: every param, as strings.
        metrics: the latest value of every metric.
        tags: every tag, MLflow's own (``mlflow.*``) included.
        artifact_uri: where the run's artifacts live.
        start_time, end_time: seconds since the epoch; ``end_time`` is ``None`` while running.
    """

    run_id: str
    experiment: str
    run_name: str
    parent_id: str | None
    status: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""
    start_time: float | None = None
    end_time: float | None = None


class Tracker(Protocol):
    """Where runs, their params, metrics, histories and artifacts are recorded.

    Every method raises :class:`~bayesflow.errors.TrackingError` when the store cannot
    be read or written, or the run does not exist.
    """

    uri: str

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
        """Create a run (and its experiment if needed) with its params (stringified), tags
        and metrics (at step 0); return its id."""
        ...

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        """Log several metrics at one step (0 when not given)."""
        ...

    def log_history(
        self, run_id: str, key: str, values: Sequence[float], steps: Sequence[int] | None = None
    ) -> None:
        """Log a whole metric history in one batched call; steps default to 0, 1, 2, ..."""
        ...

    def get_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """Every ``(step, value)`` logged for ``key``, ordered by step."""
        ...

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: dict[str, float] | None = None,
        histories: dict[str, Sequence[float]] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Log metrics (at step 0), whole histories (steps 0, 1, ...) and tags at once:
        one request to the store, however many (the store splits it into its pages)."""
        ...

    def log_artifact(
        self, run_id: str, local_path: str | Path, artifact_path: str | None = None
    ) -> None:
        """Copy a local file into the run's artifacts, under ``artifact_path`` if given."""
        ...

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Write ``text`` as the artifact ``artifact_file`` (a path relative to the run)."""
        ...

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        """Mark a run ended with ``FINISHED``, ``FAILED`` or ``KILLED``."""
        ...

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set (or overwrite) tags of a run."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record."""
        ...

    def search_runs(
        self,
        experiment: str,
        tags: dict[str, str] | None = None,
        parent_id: str | None = None,
        status: str | None = None,
    ) -> list[RunRecord]:
        """Runs of an experiment matching every given filter, oldest first."""
        ...

    def download_artifact(self, run_id: str, artifact_path: str, dst_dir: str | Path) -> Path:
        """Copy one artifact (file or folder) of a run into ``dst_dir``; return its local path.
        A run without it that is tagged ``bayesflow.computed_by`` gives that run's."""
        ...

    def run_url(self, run_id: str) -> str:
        """Where a person finds the run; see each implementation for the form."""
        ...


def stringify_params(params: dict[str, Any] | None) -> dict[str, str]:
    """Param values as the strings a store keeps (``str(value)``; ``None`` becomes ``"None"``)."""
    return {str(key): str(value) for key, value in (params or {}).items()}


def check_status(status: str) -> str:
    """Return ``status`` if a run may end with it, else raise :class:`TrackingError`."""
    if status not in RUN_STATUSES:
        raise TrackingError(
            f"cannot end a run with status {status!r}: expected one of {list(RUN_STATUSES)}"
        )
    return status
