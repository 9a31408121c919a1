"""The end-of-run summary: metrics chosen by what the run logged, flagged fits counted."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from bayesflow.cli import run as cli_run


def result_of(frame: pd.DataFrame) -> SimpleNamespace:
    """A stand-in for api.RunResult with what the summary reads."""
    outcome = SimpleNamespace(status={"fit/a": "ran"}, failed=[], errors={})
    return SimpleNamespace(
        results=lambda: frame, outcome=outcome, seconds=1.0, tracking_uri="sqlite:///mlflow.db",
        experiment="x", run_id="r1", report_html=None,
    )


def test_flagged_fits_are_counted_per_row_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    frame = pd.DataFrame({
        "method": ["sghmc", "sghmc", "vi"], "temperature": [0.1, 0.1, 0.1], "seed": [0, 1, 0],
        "test_nll": [0.2, 0.3, 0.25], "test_accuracy": [0.9, 0.8, 0.85],
        "flag/kinetic_temperature_ratio": ["kinetic temperature 1.3 x the target", "", ""],
        "flag/train_loss": ["", "", ""],
    })
    cli_run._summary(result_of(frame))
    printed = capsys.readouterr().out
    sghmc_row = next(line for line in printed.splitlines() if "sghmc" in line)
    vi_row = next(line for line in printed.splitlines() if "│ vi" in line)
    assert "⚠ 1" in sghmc_row and "0.2500" in sghmc_row  # the mean of 0.2 and 0.3
    assert "⚠" not in vi_row
    assert "⚠ 1 of 3 fits flagged (kinetic_temperature_ratio)" in printed
    assert "train_loss" not in printed  # an empty flag column is not named


def test_regression_runs_show_rmse_and_no_flag_column_without_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    frame = pd.DataFrame({
        "method": ["map"], "temperature": [0.0], "seed": [0],
        "test_nll": [1.1], "test_rmse": [0.7], "test_coverage_90": [0.88],
    })
    cli_run._summary(result_of(frame))
    printed = capsys.readouterr().out
    assert "test_rmse" in printed and "0.7000" in printed and "test_coverage_90" in printed
    assert "flagged" not in printed and "test_accuracy" not in printed


def test_a_fit_at_t_0_is_not_written_as_the_temperature_free_map(capsys: pytest.CaptureFixture[str]) -> None:
    """VI at T = 0 is its own fit and reads 0; MAP, fitted once for every temperature and
    logged at 0, reads T → 0, the one name the report uses too."""
    frame = pd.DataFrame({
        "method": ["map", "vi", "vi"], "temperature": [0.0, 0.0, 1.0],
        "temperature_shared": [True, False, False], "seed": [0, 0, 0], "test_nll": [0.5, 0.4, 0.3],
    })
    cli_run._summary(result_of(frame))
    rows = {line.split("│")[1].strip() + "@" + line.split("│")[2].strip()
            for line in capsys.readouterr().out.splitlines() if line.count("│") > 3}
    assert {"map@T → 0", "vi@0", "vi@1"} <= rows, rows
    assert not any("shared" in row for row in rows)
