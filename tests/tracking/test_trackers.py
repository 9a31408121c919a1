"""One behaviour suite run against both trackers: the in-memory double and real MLflow."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from bayesflow.errors import TrackingError
from bayesflow.tracking import (
    InMemoryTracker,
    MlflowTracker,
    Tracker,
    resolve_tracking_uri,
    results_frame,
)

PARAMS = {"method": "sghmc", "engine": "sghmc", "temperature": 0.1, "seed": 3, "lr": 1e-3}


@pytest.fixture(scope="module", params=["memory", "mlflow"])
def tracker(request, tmp_path_factory) -> Tracker:
    """One store per tracker kind, shared by the module; tests use their own experiment."""
    if request.param == "memory":
        return InMemoryTracker(tmp_path_factory.mktemp("memory"))
    return MlflowTracker(f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db")


@pytest.fixture
def experiment(request) -> str:
    """An experiment name unique to the test."""
    return request.node.originalname


def reopen(tracker: Tracker) -> Tracker:
    """A second tracker over the same store (the same object for the in-memory one)."""
    return MlflowTracker(tracker.uri) if isinstance(tracker, MlflowTracker) else tracker


def start_family(tracker: Tracker, experiment: str) -> tuple[str, list[str]]:
    """A parent run and two children at temperatures 1.0 and 0.1."""
    parent = tracker.start_run(experiment, "parent", tags={"workflow": "demo"})
    children = [
        tracker.start_run(
            experiment,
            f"sghmc-T{temperature}",
            parent_id=parent,
            params={**PARAMS, "temperature": temperature},
            tags={"workflow": "demo", "stage": "fit"},
        )
        for temperature in (1.0, 0.1)
    ]
    return parent, children


def test_runs_round_trip_params_and_parent(tracker, experiment) -> None:
    """Children carry stringified params, their name, parent and experiment."""
    parent, (child, _) = start_family(tracker, experiment)
    record = reopen(tracker).get_run(child)
    assert record.params == {**{k: str(v) for k, v in PARAMS.items()}, "temperature": "1.0"}
    assert (record.run_name, record.parent_id, record.experiment) == (
        "sghmc-T1.0",
        parent,
        experiment,
    )
    assert record.status == "RUNNING" and record.end_time is None and record.start_time
    assert tracker.get_run(parent).parent_id is None


def test_metrics_and_tags_round_trip(tracker, experiment) -> None:
    """Metrics keep their latest value; tags are set and overwritten."""
    run = tracker.start_run(experiment, "run", tags={"stage": "fit"})
    tracker.log_metrics(run, {"test_nll": 0.5, "test_accuracy": 0.75})
    tracker.log_metrics(run, {"test_nll": 0.25}, step=1)
    tracker.set_tags(run, {"stage": "evaluate", "note": "ok"})
    record = tracker.get_run(run)
    assert record.metrics == {"test_nll": 0.25, "test_accuracy": 0.75}
    assert {"stage": "evaluate", "note": "ok"}.items() <= record.tags.items()


def test_a_run_starts_with_its_metrics(tracker, experiment) -> None:
    """start_run logs metrics (at step 0) with the params; a child of a parent too."""
    parent = tracker.start_run(experiment, "parent")
    run = tracker.start_run(experiment, "child", parent_id=parent, params={"seed": 1},
                            metrics={"flags": 2.0, "fit_seconds": 0.5})
    record = tracker.get_run(run)
    assert record.metrics == {"flags": 2.0, "fit_seconds": 0.5} and record.params == {"seed": "1"}
    assert record.parent_id == parent and tracker.get_history(run, "flags") == [(0, 2.0)]


def test_history_round_trips_in_full(tracker, experiment) -> None:
    """A 50-step history comes back whole, in order, and sets the latest value."""
    run = tracker.start_run(experiment, "run")
    values = [1.0 / (step + 1) for step in range(50)]
    tracker.log_history(run, "loss", values, steps=range(0, 100, 2))
    assert tracker.get_history(run, "loss") == list(zip(range(0, 100, 2), values))
    assert tracker.get_run(run).metrics["loss"] == pytest.approx(values[-1])
    if isinstance(tracker, MlflowTracker):
        from mlflow.tracking import MlflowClient

        history = MlflowClient(tracking_uri=tracker.uri).get_metric_history(run, "loss")
        assert sorted(metric.step for metric in history) == list(range(0, 100, 2))


def test_history_is_one_batched_call(tracker, experiment, monkeypatch) -> None:
    """The MLflow tracker logs a history with a single log_batch call."""
    if not isinstance(tracker, MlflowTracker):
        pytest.skip("only the MLflow client makes calls")
    run = tracker.start_run(experiment, "run")
    calls = []
    original = tracker.client.log_batch
    monkeypatch.setattr(
        tracker.client, "log_batch", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    tracker.log_history(run, "loss", [0.0] * 50)
    assert len(calls) == 1


def test_batch_logs_metrics_histories_and_tags_at_once(tracker, experiment, monkeypatch) -> None:
    """log_batch sets metrics at step 0, whole histories and tags; MLflow gets one call."""
    run = tracker.start_run(experiment, "run")
    calls = []
    if isinstance(tracker, MlflowTracker):
        original = tracker.client.log_batch
        monkeypatch.setattr(
            tracker.client, "log_batch", lambda *a, **k: calls.append(1) or original(*a, **k)
        )
    tracker.log_batch(run, metrics={"steps": 3.0}, histories={"loss": [3.0, 2.0, 1.0]},
                      tags={"note": "ok"})
    record = tracker.get_run(run)
    assert record.metrics == {"steps": 3.0, "loss": 1.0} and record.tags["note"] == "ok"
    assert tracker.get_history(run, "loss") == [(0, 3.0), (1, 2.0), (2, 1.0)]
    assert calls == ([1] if isinstance(tracker, MlflowTracker) else [])


def test_artifacts_round_trip(tracker, experiment, tmp_path) -> None:
    """A file and a text artifact come back byte for byte, alone or as a folder."""
    run = tracker.start_run(experiment, "run")
    source = tmp_path / "posterior.npz"
    source.write_bytes(b"\x00\x01posterior")
    tracker.log_artifact(run, source, "posterior")
    tracker.log_text(run, "# report", "reports/summary.md")
    file = tracker.download_artifact(run, "posterior/posterior.npz", tmp_path / "one")
    folder = tracker.download_artifact(run, "reports", tmp_path / "two")
    assert file.read_bytes() == b"\x00\x01posterior"
    assert (folder / "summary.md").read_text() == "# report"
    assert tracker.get_run(run).artifact_uri.startswith("file://")


def test_a_reused_run_gives_its_sources_artifacts(tracker, experiment, tmp_path) -> None:
    """A run tagged bayesflow.computed_by gives the source's artifact for a path it
    lacks (through a chain of two links), its own for a path it has, and an error for a
    path neither has."""
    source = tracker.start_run(experiment, "computed")
    posterior = tmp_path / "posterior.npz"
    posterior.write_bytes(b"source posterior")
    tracker.log_artifact(source, posterior, "posterior")
    middle = tracker.start_run(experiment, "reused", tags={"bayesflow.computed_by": source})
    reused = tracker.start_run(experiment, "reused again", tags={"bayesflow.computed_by": middle})
    tracker.log_text(reused, "own", "evaluation/notes.txt")
    file = tracker.download_artifact(reused, "posterior/posterior.npz", tmp_path / "one")
    assert file.read_bytes() == b"source posterior"
    own = tracker.download_artifact(reused, "evaluation/notes.txt", tmp_path / "two")
    assert own.read_text() == "own"
    with pytest.raises(TrackingError):
        tracker.download_artifact(reused, "model/MLmodel", tmp_path / "three")
    plain = tracker.start_run(experiment, "plain")
    with pytest.raises(TrackingError):
        tracker.download_artifact(plain, "posterior/posterior.npz", tmp_path / "four")


def test_mlflow_artifacts_live_next_to_the_database(tracker, experiment, tmp_path) -> None:
    """A SQLite store's artifacts go to <db folder>/mlartifacts/<experiment id>."""
    if not isinstance(tracker, MlflowTracker):
        pytest.skip("the in-memory tracker has no database")
    run = tracker.start_run(experiment, "run")
    database = Path(tracker.uri[len("sqlite:///") :])
    experiment_id = tracker.client.get_experiment_by_name(experiment).experiment_id
    expected = (database.parent / "mlartifacts" / experiment_id / run / "artifacts").as_uri()
    assert tracker.get_run(run).artifact_uri == expected


def test_search_by_tag_parent_and_status(tracker, experiment) -> None:
    """Search filters by tag, by parent and by status, and combines them."""
    parent, children = start_family(tracker, experiment)
    tracker.end_run(children[0])
    by_tag = tracker.search_runs(experiment, tags={"stage": "fit"})
    by_parent = tracker.search_runs(experiment, parent_id=parent)
    finished = tracker.search_runs(experiment, parent_id=parent, status="FINISHED")
    assert {record.run_id for record in by_tag} == set(children)
    assert {record.run_id for record in by_parent} == set(children)
    assert [record.run_id for record in finished] == [children[0]]
    assert len(tracker.search_runs(experiment, tags={"workflow": "demo"})) == 3
    assert tracker.search_runs("no such experiment") == []


def test_parent_tag_moves_a_run(tracker, experiment) -> None:
    """Setting ``mlflow.parentRunId`` moves a child under another parent, for search too."""
    _, (child, _) = start_family(tracker, experiment)
    other = tracker.start_run(experiment, "other parent")
    tracker.set_tags(child, {"mlflow.parentRunId": other})
    assert tracker.get_run(child).parent_id == other
    assert [r.run_id for r in tracker.search_runs(experiment, parent_id=other)] == [child]


def test_end_status_killed_persists(tracker, experiment) -> None:
    """A run ended KILLED reads back KILLED, with an end time, from a fresh tracker."""
    run = tracker.start_run(experiment, "run")
    tracker.end_run(run, "KILLED")
    record = reopen(tracker).get_run(run)
    assert record.status == "KILLED" and record.end_time is not None


def test_errors_are_tracking_errors(tracker, experiment, tmp_path) -> None:
    """A bad status, an unknown run and a missing file raise TrackingError."""
    run = tracker.start_run(experiment, "run")
    with pytest.raises(TrackingError, match="expected one of"):
        tracker.end_run(run, "DONE")
    with pytest.raises(TrackingError):
        tracker.get_run("0123456789abcdef0123456789abcdef")
    with pytest.raises(TrackingError, match="no such file"):
        tracker.log_artifact(run, tmp_path / "missing.npz")


def test_results_frame_columns_and_dtypes(tracker, experiment) -> None:
    """One row per run, typed sweep columns and metric columns, sorted by temperature."""
    _, children = start_family(tracker, experiment)
    tracker.log_metrics(children[0], {"test_nll": 0.5, "test_accuracy": 0.8})
    tracker.log_metrics(children[1], {"test_nll": 0.4})
    tracker.end_run(children[0])
    frame = results_frame(tracker, children)
    assert list(frame.columns) == [
        "method", "engine", "temperature", "seed", "status",
        "test_accuracy", "test_nll", "run_id", "run_name",
    ]  # fmt: skip
    assert frame["temperature"].tolist() == [0.1, 1.0]
    assert frame["run_id"].tolist() == children[::-1]
    assert frame["temperature"].dtype == "float64" and frame["seed"].dtype == "int64"
    assert frame["test_accuracy"].isna().tolist() == [True, False]
    assert frame["status"].tolist() == ["RUNNING", "FINISHED"]


def test_tracker_pickles(tracker) -> None:
    """A tracker travels to a worker process (the MLflow one without its client)."""
    copy = pickle.loads(pickle.dumps(tracker))
    assert copy.uri == tracker.uri


def test_resolve_tracking_uri(tmp_path) -> None:
    """Relative SQLite and plain paths become absolute; other URIs are unchanged."""
    assert (
        resolve_tracking_uri("sqlite:///mlflow.db", tmp_path)
        == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    )
    assert resolve_tracking_uri("sqlite:////abs/mlflow.db", tmp_path) == "sqlite:////abs/mlflow.db"
    assert resolve_tracking_uri("runs", tmp_path) == (tmp_path.resolve() / "runs").as_uri()
    assert resolve_tracking_uri("http://localhost:5000", tmp_path) == "http://localhost:5000"


@pytest.mark.parametrize("name", ["a%20b", "q?x=1", "h#frag", "sp ace", "θ→0 ±", "a%2Fb"])
def test_a_sqlite_uri_names_its_folder_whatever_the_folder_is_called(name: str, tmp_path) -> None:
    """The URI of a store in a folder named with URI characters reads back, by SQLAlchemy
    and by bayesflow, as that very file; a query after the path is kept."""
    from sqlalchemy.engine import make_url

    from bayesflow.tracking.uri import sqlite_database, sqlite_uri

    base = tmp_path / name
    uri = resolve_tracking_uri("sqlite:///mlflow.db", base)
    assert uri == sqlite_uri(base.resolve() / "mlflow.db") and uri.isascii()
    assert make_url(uri).database == str(base.resolve() / "mlflow.db")
    assert sqlite_database(uri) == base.resolve() / "mlflow.db"
    assert resolve_tracking_uri(uri, tmp_path) == uri  # absolute: the same file
    with_query = resolve_tracking_uri("sqlite:///mlflow.db?timeout=20", base)
    assert make_url(with_query).query == {"timeout": "20"}
    assert make_url(with_query).database == str(base.resolve() / "mlflow.db")


def test_import_does_not_load_mlflow() -> None:
    """Importing bayesflow.tracking leaves mlflow unimported."""
    code = "import sys, bayesflow.tracking; assert 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
