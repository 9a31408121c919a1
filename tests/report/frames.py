"""Hand-made results frames for the report tests: with flags, as a sweep, as regression."""

from __future__ import annotations

import pandas as pd

from .conftest import synthetic_results

HOT = "kinetic temperature 5.0 times the target <b>hot</b>"


def with_flags(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The synthetic frame with two flag columns: SGHMC at T = 0.1 seed 0 ran hot (a
    column no summary table shows), and Laplace at T = 1 seed 1 has a flag on its NLL."""
    frame = (synthetic_results() if frame is None else frame).copy()
    frame["kinetic_temperature_ratio"] = 1.0
    frame["flag/kinetic_temperature_ratio"] = ""
    frame["flag/test_nll"] = ""
    hot = (frame["method"] == "sghmc") & (frame["temperature"] == 0.1) & (frame["seed"] == 0)
    frame.loc[hot, "kinetic_temperature_ratio"] = 5.0
    frame.loc[hot, "flag/kinetic_temperature_ratio"] = HOT
    odd = (frame["method"] == "laplace") & (frame["temperature"] == 1.0) & (frame["seed"] == 1)
    frame.loc[odd, "flag/test_nll"] = "NLL from a diverged Hessian"
    return frame


def sweep() -> pd.DataFrame:
    """Two variants of `prior.variance`; the second's NLL is 0.1 higher everywhere."""
    base = synthetic_results()
    worse = base.assign(test_nll=base["test_nll"] + 0.1)
    frame = pd.concat([
        base.assign(variant="prior.variance=0.1", **{"swept/prior.variance": 0.1}),
        worse.assign(variant="prior.variance=1", **{"swept/prior.variance": 1.0}),
    ], ignore_index=True)
    frame["cell"] = frame["variant"] + "/" + frame["cell"]
    frame["run_id"] = [f"run-{index}" for index in range(len(frame))]
    return frame


def regression() -> pd.DataFrame:
    """The synthetic frame as a regression study: NLL, RMSE and coverages, no accuracy."""
    frame = synthetic_results().drop(columns=["test_accuracy", "test_ece", "test_brier"])
    failed = frame["status"] != "FINISHED"
    frame["test_rmse"] = 0.5 + 0.1 * frame["temperature"]
    frame["test_coverage_50"] = 0.52
    frame["test_coverage_95"] = 0.93
    frame.loc[failed, ["test_rmse", "test_coverage_50", "test_coverage_95"]] = float("nan")
    return frame
