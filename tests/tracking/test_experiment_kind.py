"""MLflow as seen from outside: experiments open on the runs table; an unreachable or missing store fails fast and creates nothing."""

from __future__ import annotations

from pathlib import Path

from bayesflow.tracking import MlflowTracker, resolve_tracking_uri
from tests.waiting import HANG_SECONDS


def test_new_experiments_are_marked_as_model_development(tmp_path: Path) -> None:
    """The experiment carries mlflow.experimentKind=custom_model_development (not GenAI)."""
    import mlflow

    tracker = MlflowTracker(resolve_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db", tmp_path))
    tracker.end_run(tracker.start_run("workflow", "run", params={}, tags={}), "FINISHED")
    experiment = mlflow.MlflowClient(tracker.uri).get_experiment_by_name("workflow")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_an_unreachable_tracking_server_fails_fast_naming_the_uri() -> None:
    """A refused http store is a TrackingError naming the URI (MLflow would retry for minutes)."""
    import socket

    import pytest

    from bayesflow.errors import TrackingError
    from bayesflow.tracking.uri import probe_server

    with socket.socket() as probe:  # a port nothing listens on: bind, then close
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TrackingError, match=f"the tracking server http://127.0.0.1:{port} does not answer"):
        probe_server(f"http://127.0.0.1:{port}")


def test_reading_a_store_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    """`bayesflow report <id>` in a folder without mlflow.db says so and creates no store."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", "report", "0123456789abcdef"],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_SECONDS,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert done.returncode == 1
    assert "no MLflow store at sqlite:///" in done.stderr
    assert not (tmp_path / "mlflow.db").exists()
