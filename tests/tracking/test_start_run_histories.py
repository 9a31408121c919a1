"""``MlflowTracker.start_run`` takes a fit's per-step series with its params (one request
less per fit): the series read back as ``log_batch`` would have logged them."""

from __future__ import annotations

from pathlib import Path

from bayesflow.tracking import MlflowTracker


def test_histories_given_to_start_run_read_back_by_step(tmp_path: Path) -> None:
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert tracker.start_run_takes_histories is True
    series = {"train_loss": [3.0, 2.0, 1.5], "trace/step_size": [0.1] * 1200}  # > one page
    run_id = tracker.start_run(
        "histories", "fit", params={"seed": 0}, metrics={"fit_seconds": 1.0}, histories=series
    )
    other = tracker.start_run("histories", "apart", params={"seed": 0}, metrics={"fit_seconds": 1.0})
    tracker.log_batch(other, histories=series)
    for run in (run_id, other):
        assert tracker.get_history(run, "train_loss") == [(0, 3.0), (1, 2.0), (2, 1.5)]
        assert tracker.get_history(run, "trace/step_size") == [(step, 0.1) for step in range(1200)]
        record = tracker.get_run(run)
        assert record.metrics == {"fit_seconds": 1.0, "train_loss": 1.5, "trace/step_size": 0.1}
        assert record.params == {"seed": "0"}
