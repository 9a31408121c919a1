"""Experiments bayesflow creates open on the runs table of MLflow 3's UI."""

from __future__ import annotations

from pathlib import Path

from bayesflow.tracking import MlflowTracker, resolve_tracking_uri


def test_new_experiments_are_marked_as_model_development(tmp_path: Path) -> None:
    """The experiment carries mlflow.experimentKind=custom_model_development (not GenAI)."""
    import mlflow

    tracker = MlflowTracker(resolve_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db", tmp_path))
    tracker.end_run(tracker.start_run("workflow", "run", params={}, tags={}), "FINISHED")
    experiment = mlflow.MlflowClient(tracker.uri).get_experiment_by_name("workflow")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
