"""The MLflow tracker: the only module of bayesflow that imports mlflow.

It talks to the store through an explicit ``MlflowClient(tracking_uri=...)`` and never
through MLflow's fluent, process-global ``mlflow.start_run`` state, so several trackers
(or worker processes) can share one store. mlflow is imported on first use, which keeps
``import bayesflow.tracking`` cheap.

For a SQLite store the database path is made absolute once, when the tracker is built
(:func:`resolve_tracking_uri`), and each experiment keeps its artifacts next to the
database, in ``<db folder>/mlartifacts/<experiment id>``, instead of MLflow's default of
``./mlruns`` under whatever the working directory happens to be.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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
from bayesflow.tracking.mends import mend_mlflow
from bayesflow.tracking.preflight import is_store_fault, store_fault
from bayesflow.tracking.uri import probe_server, resolve_tracking_uri, sqlite_database, store_lock

__all__ = ["ARTIFACT_FOLDER", "MlflowTracker", "probe_server", "resolve_tracking_uri"]

ARTIFACT_FOLDER = "mlartifacts"
SQL_NOISE = ("[SQL:", "[parameters:", "(Background on this error")
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# MLflow's largest page of search results (SEARCH_MAX_RESULTS_THRESHOLD).
_PAGE_SIZE = 50_000


def _artifact_root(uri: str) -> str | None:
    """``<db folder>/mlartifacts`` as a file URI for an absolute SQLite store, else None."""
    database = sqlite_database(uri)
    if database is None or not database.is_absolute():
        return None
    return (database.parent / ARTIFACT_FOLDER).as_uri()


def _quote(value: str) -> str:
    """A string literal of MLflow's search syntax, which has no escape character."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise TrackingError(
        f"cannot search for the value {value!r}: MLflow search strings cannot hold both "
        "quote characters; search without this filter and filter the records in Python"
    )


class MlflowTracker:
    """A tracker over an MLflow tracking store.

    Args:
        uri: the tracking URI (``sqlite:///mlflow.db``, ``http://host:5000``, a folder);
            relative paths are resolved against ``base``.
        base: the folder relative paths are taken from; the working directory if not given.

    Attributes:
        uri: the resolved tracking URI.
    """

    # start_run logs per-step series with the run's params (one request less per fit).
    start_run_takes_histories = True

    def __init__(self, uri: str, base: Path | None = None) -> None:
        # MLflow draws a progress bar for every artifact download; results() does several.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        self.uri = resolve_tracking_uri(uri, Path.cwd() if base is None else base)
        self._client: Any = None
        self._experiment_ids: dict[str, str] = {}
        self._experiment_names: dict[str, str] = {}
        self._parents: set[str] = set()  # parent runs known to exist

    def __getstate__(self) -> dict[str, Any]:
        # The client holds a database engine; a worker process builds its own.
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        """The ``mlflow.tracking.MlflowClient`` bound to :attr:`uri`, built on first use."""
        if self._client is None:
            probe_server(self.uri)
            from mlflow.tracking import MlflowClient

            mend_mlflow()
            with self._translate("connecting"), store_lock(self.uri):  # one creator at a time
                database = sqlite_database(self.uri)
                if database is not None:  # a new store: copied, not migrated
                    from bayesflow.tracking.sqlite_seed import seed_store

                    seed_store(database)
                self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Turn mlflow's and the store's exceptions into :class:`TrackingError`."""
        import sqlalchemy.exc
        from mlflow.exceptions import MlflowException

        try:
            yield
        except (MlflowException, OSError, sqlalchemy.exc.SQLAlchemyError) as exc:
            database = sqlite_database(self.uri)
            if database is not None and is_store_fault(exc, database):  # full, read-only, locked...
                raise store_fault(exc, database, what) from exc
            # SQLAlchemy's text repeats the SQL statement, its parameters and a web link.
            text = "\n".join(
                line for line in str(exc).splitlines() if not line.startswith(SQL_NOISE)
            )
            raise TrackingError(
                f"{what} failed on the tracking store {self.uri}: {text}\n"
                "  fix: check that the store is reachable and writable (for SQLite, that "
                "its folder exists and no other program holds the file), that the run id "
                "is right, or point the workflow's tracking uri elsewhere"
            ) from exc

    def _experiment_id(self, name: str) -> str:
        if name not in self._experiment_ids:
            from mlflow.exceptions import MlflowException

            with self._translate(f"opening experiment {name!r}"):
                experiment = self.client.get_experiment_by_name(name)
                if experiment is None:
                    try:
                        experiment_id = self._create_experiment(name)
                    except MlflowException as exc:
                        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                            raise
                        experiment = self.client.get_experiment_by_name(name)
                if experiment is not None:
                    if experiment.lifecycle_stage == "deleted":
                        raise TrackingError(
                            f"experiment {name!r} in {self.uri} is deleted; restore it with "
                            f"`mlflow experiments restore --experiment-id "
                            f"{experiment.experiment_id}` or choose another experiment name"
                        )
                    experiment_id = experiment.experiment_id
            self._experiment_ids[name] = experiment_id
            self._experiment_names[experiment_id] = name
        return self._experiment_ids[name]

    def _create_experiment(self, name: str) -> str:
        # MLflow 3's UI opens an experiment without this tag on its GenAI pages; the tag
        # marks it as model development, so the UI opens on the runs table.
        tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
        root = _artifact_root(self.uri)
        if root is None:
            return str(self.client.create_experiment(name, tags=tags))
        # MlflowClient cannot name the artifact root, and the experiment id is only known
        # inside the creating transaction; a store with the root set derives
        # "<root>/<experiment id>" there, atomically.
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = SqlAlchemyStore(self.uri, root)
        try:
            from mlflow.entities import ExperimentTag

            return str(store.create_experiment(name, tags=[ExperimentTag(k, v) for k, v in tags.items()]))
        finally:
            store.engine.dispose()

    def _experiment_name(self, experiment_id: str) -> str:
        if experiment_id not in self._experiment_names:
            name = self.client.get_experiment(experiment_id).name
            self._experiment_names[experiment_id] = name
            self._experiment_ids.setdefault(name, experiment_id)
        return self._experiment_names[experiment_id]

    def _record(self, run: Any) -> RunRecord:
        info, data = run.info, run.data
        tags = dict(data.tags)
        return RunRecord(
            run_id=info.run_id,
            experiment=self._experiment_name(info.experiment_id),
            run_name=info.run_name or tags.get(RUN_NAME_TAG, ""),
            parent_id=tags.get(PARENT_TAG),
            status=info.status,
            params=dict(data.params),
            metrics=dict(data.metrics),
            tags=tags,
            artifact_uri=info.artifact_uri,
            start_time=None if info.start_time is None else info.start_time / 1000,
            end_time=None if info.end_time is None else info.end_time / 1000,
        )

    def start_run(
        self,
        experiment: str,
        run_name: str,
        *,
        parent_id: str | None = None,
        params: dict[str, Any] | None = None,
        tags: dict[str, str] | None = None,
        metrics: dict[str, float] | None = None,
        histories: dict[str, Sequence[float]] | None = None,
    ) -> str:
        """Create a run; see :meth:`bayesflow.tracking.Tracker.start_run`. Two requests:
        the run with its tags, then its params, metrics and ``histories`` (per-step series,
        as :meth:`log_batch` takes them; :attr:`start_run_takes_histories`) in one
        ``log_batch`` (a parent is looked up once per tracker)."""
        from mlflow.entities import Metric, Param

        experiment_id = self._experiment_id(experiment)
        all_tags = {**(tags or {}), RUN_NAME_TAG: run_name}
        with self._translate(f"starting run {run_name!r} in experiment {experiment!r}"):
            if parent_id is not None:
                if parent_id not in self._parents:
                    self.client.get_run(parent_id)
                    self._parents.add(parent_id)
                all_tags[PARENT_TAG] = parent_id
            run = self.client.create_run(experiment_id, tags=all_tags, run_name=run_name)
            batch = [Param(key, value) for key, value in stringify_params(params).items()]
            timestamp = int(time.time() * 1000)
            values = [Metric(key, float(value), timestamp, 0) for key, value in (metrics or {}).items()]
            for key, series in (histories or {}).items():
                values += [Metric(key, float(value), timestamp, step) for step, value in enumerate(series)]
            if batch or values:
                self.client.log_batch(run.info.run_id, params=batch, metrics=values)
        return str(run.info.run_id)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int | None = None) -> None:
        """Log metrics at one step in one batched call."""
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        batch = [Metric(key, float(value), timestamp, step or 0) for key, value in metrics.items()]
        with self._translate(f"logging metrics of run {run_id}"):
            self.client.log_batch(run_id, metrics=batch)

    def log_history(
        self, run_id: str, key: str, values: Sequence[float], steps: Sequence[int] | None = None
    ) -> None:
        """Log a metric history with one ``MlflowClient.log_batch`` call."""
        from mlflow.entities import Metric

        steps = list(range(len(values))) if steps is None else list(steps)
        if len(steps) != len(values):
            raise TrackingError(
                f"history {key!r} of run {run_id}: expected as many steps as values, got "
                f"{len(steps)} steps and {len(values)} values"
            )
        timestamp = int(time.time() * 1000)
        batch = [Metric(key, float(v), timestamp, int(s)) for s, v in zip(steps, values)]
        with self._translate(f"logging history {key!r} of run {run_id}"):
            self.client.log_batch(run_id, metrics=batch)

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: dict[str, float] | None = None,
        histories: dict[str, Sequence[float]] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Log metrics, histories and tags with one ``MlflowClient.log_batch`` call (which
        splits it into MLflow's pages of 1,000 metrics and 100 tags)."""
        from mlflow.entities import Metric, RunTag

        timestamp = int(time.time() * 1000)
        batch = [Metric(key, float(value), timestamp, 0) for key, value in (metrics or {}).items()]
        for key, values in (histories or {}).items():
            batch += [Metric(key, float(value), timestamp, step) for step, value in enumerate(values)]
        labels = [RunTag(key, str(value)) for key, value in (tags or {}).items()]
        if not batch and not labels:
            return
        with self._translate(f"logging a batch of run {run_id}"):
            self.client.log_batch(run_id, metrics=batch, tags=labels)

    def get_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """Every ``(step, value)`` of a metric, ordered by step."""
        with self._translate(f"reading history {key!r} of run {run_id}"):
            history = self.client.get_metric_history(run_id, key)
        points = sorted(history, key=lambda metric: (metric.step, metric.timestamp))
        return [(int(metric.step), float(metric.value)) for metric in points]

    def log_artifact(
        self, run_id: str, local_path: str | Path, artifact_path: str | None = None
    ) -> None:
        """Copy a local file into the run's artifacts."""
        if not Path(local_path).is_file():
            raise TrackingError(
                f"cannot log artifact {str(local_path)!r} of run {run_id}: no such file; "
                "write the file before logging it"
            )
        with self._translate(f"logging artifact {str(local_path)!r} of run {run_id}"):
            self.client.log_artifact(run_id, str(local_path), artifact_path)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Write text as an artifact file of the run."""
        with self._translate(f"logging text {artifact_file!r} of run {run_id}"):
            self.client.log_text(run_id, text, artifact_file)

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        """End a run with ``FINISHED``, ``FAILED`` or ``KILLED``."""
        check_status(status)
        with self._translate(f"ending run {run_id}"):
            self.client.set_terminated(run_id, status)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set tags of a run in one batched call (values stringified)."""
        from mlflow.entities import RunTag

        batch = [RunTag(key, str(value)) for key, value in tags.items()]
        with self._translate(f"setting tags of run {run_id}"):
            self.client.log_batch(run_id, tags=batch)

    def get_run(self, run_id: str) -> RunRecord:
        """The run's record."""
        with self._translate(f"reading run {run_id}"):
            return self._record(self.client.get_run(run_id))

    def search_runs(
        self,
        experiment: str,
        tags: dict[str, str] | None = None,
        parent_id: str | None = None,
        status: str | None = None,
    ) -> list[RunRecord]:
        """Runs of an experiment matching every filter, oldest first ([] if none)."""
        clauses = [f"tags.`{key}` = {_quote(str(value))}" for key, value in (tags or {}).items()]
        if parent_id is not None:
            clauses.append(f"tags.`{PARENT_TAG}` = {_quote(parent_id)}")
        if status is not None:
            clauses.append(f"attributes.status = {_quote(status)}")
        with self._translate(f"searching runs of experiment {experiment!r}"):
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                return []
            records: list[RunRecord] = []
            token = None
            while True:
                page = self.client.search_runs(
                    [found.experiment_id],
                    filter_string=" and ".join(clauses),
                    max_results=_PAGE_SIZE,
                    order_by=["attributes.start_time ASC"],
                    page_token=token,
                )
                records.extend(self._record(run) for run in page)
                token = page.token
                if not token:
                    return records

    def download_artifact(self, run_id: str, artifact_path: str, dst_dir: str | Path) -> Path:
        """Copy one artifact file or folder of a run into ``dst_dir``; return its local path
        (a reused run's source's when it has none: ``bayesflow.computed_by``)."""
        destination = Path(dst_dir).resolve()
        destination.mkdir(parents=True, exist_ok=True)
        holder = run_id
        for _ in range(MAX_LINKS):
            try:
                with self._translate(f"downloading artifact {artifact_path!r} of run {run_id}"):
                    return Path(self.client.download_artifacts(holder, artifact_path, str(destination)))
            except TrackingError:
                link = self.get_run(holder).tags.get(COMPUTED_BY_TAG)
                if link is None:
                    raise
                holder = link
        raise TrackingError(
            f"run {run_id}: more than {MAX_LINKS} {COMPUTED_BY_TAG} links lead to no "
            f"artifact {artifact_path!r}; the runs' tags form a loop"
        )

    def run_url(self, run_id: str) -> str:
        """The run's page for an ``http(s)`` store, else ``runs:/<run id>``.

        ``runs:/<run id>`` is the URI MLflow's own APIs accept (for example
        ``mlflow.artifacts.download_artifacts("runs:/<id>/posterior")``); a local store's
        runs are browsed with ``mlflow ui --backend-store-uri <uri>``.
        """
        if self.uri.startswith(("http://", "https://")):
            record = self.get_run(run_id)
            experiment_id = self._experiment_id(record.experiment)
            return f"{self.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
        return f"runs:/{run_id}"
