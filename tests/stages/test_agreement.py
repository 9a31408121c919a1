"""The evaluate stage's agreement with `evaluate.reference`, run in this process: each fit
against the reference of its temperature and seed, recomputed here from the logged
predictives at two temperatures; a reference file holding the reference method's own
predictive gives the same numbers; with no rows held out, the training rows are compared;
for regression, W2 against the closed form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import bayesflow
from bayesflow.evaluate.agreement import agreement, gaussian_wasserstein_2, total_variation
from bayesflow.tracking import InMemoryTracker
from tests.stages.test_evaluate import PIMA

pytestmark = pytest.mark.slow
SPEC = {
    **PIMA,
    "temperatures": [0.5, 1.0],
    "methods": {name: PIMA["methods"][name] for name in ("map", "laplace", "sghmc")},
    "evaluate": {"n_samples": 20, "reference": "sghmc"},
}


def run(spec: dict[str, Any], folder: Path) -> tuple[pd.DataFrame, dict[str, Any], InMemoryTracker]:
    """Run ``spec`` into an in-memory tracker (the cache in ``folder``); its results frame
    and each fit's evaluation arrays by run id."""
    tracker = InMemoryTracker(folder / "artifacts")
    spec = {**spec, "execution": {"cache_dir": str(folder / "cache")}}
    result = bayesflow.run(bayesflow.load(spec), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracker=tracker)
    return frame, bayesflow.evaluations(result.run_id, tracker=tracker), tracker


@pytest.fixture(scope="module")
def by_method(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, dict[str, Any], Any]:
    """The run's folder, its results indexed by (method, temperature), arrays, tracker."""
    folder = tmp_path_factory.mktemp("agreement")
    frame, arrays, tracker = run(SPEC, folder)
    return folder, frame.set_index(["method", "temperature"]), arrays, tracker


def test_each_fit_is_scored_against_the_reference_of_its_temperature(by_method: Any) -> None:
    """Laplace at T = 0.5 and 1 against SGHMC at the same T, recomputed from the logged
    probabilities; the reference's rows are marked, the T → 0 MAP has no tempered reference."""
    _, rows, arrays, tracker = by_method
    for temperature in (0.5, 1.0):
        own = arrays[rows.loc[("laplace", temperature), "run_id"]]["probabilities"]
        target = arrays[rows.loc[("sghmc", temperature), "run_id"]]["probabilities"]
        assert rows.loc[("laplace", temperature), "agreement"] == pytest.approx(agreement(own, target), rel=1e-12)
        assert rows.loc[("laplace", temperature), "total_variation"] == pytest.approx(
            total_variation(own, target), rel=1e-12
        )
        assert np.isnan(rows.loc[("sghmc", temperature), "agreement"])
        tags = tracker.get_run(rows.loc[("sghmc", temperature), "run_id"]).tags
        assert tags["convention.reference"].startswith("this fit is evaluate.reference")
    assert 0 < rows.loc[("laplace", 1.0), "total_variation"] < 0.05  # Laplace is near exact here
    assert np.isnan(rows.loc[("map", 0.0), "agreement"])


def test_a_file_of_the_references_predictive_gives_the_same_scores(by_method: Any) -> None:
    """SGHMC's T = 1 probabilities written as the reference file: Laplace at T = 1 scores
    as against the method, and SGHMC at T = 1 agrees with it everywhere, TV 0."""
    folder, rows, arrays, _ = by_method
    probabilities = arrays[rows.loc[("sghmc", 1.0), "run_id"]]["probabilities"]
    path = folder / "probs.csv"
    pd.DataFrame(probabilities, columns=["p0", "p1"]).to_csv(path, index=False, float_format="%.17g")
    spec = {**SPEC, "temperatures": [1.0], "evaluate": {"n_samples": 20, "reference": {"file": str(path)}}}
    frame, _, _ = run(spec, folder)
    again = frame.set_index(["method", "temperature"])
    # The file's rows are renormalised: the predictive averages float32 probabilities, whose
    # rows sum to 1 within a few float32 epsilons (1.2e-7 each).
    rounding = 1e-6
    assert again.loc[("laplace", 1.0), "agreement"] == rows.loc[("laplace", 1.0), "agreement"]
    assert again.loc[("laplace", 1.0), "total_variation"] == pytest.approx(
        rows.loc[("laplace", 1.0), "total_variation"], abs=rounding
    )
    assert again.loc[("sghmc", 1.0), "agreement"] == 1.0
    assert again.loc[("sghmc", 1.0), "total_variation"] == pytest.approx(0.0, abs=rounding)
    assert again.loc[("map", 0.0), "agreement"] > 0.9  # the T → 0 MAP is compared with a file


def test_with_no_rows_held_out_the_training_rows_are_compared(tmp_path: Path) -> None:
    """`data.test_fraction: 0`: no test metrics, but agreement on the 768 training rows,
    recomputed from the `training_probabilities` each evaluation saves."""
    spec = {**SPEC, "temperatures": [1.0], "data": {**PIMA["data"], "test_fraction": 0}}
    frame, arrays, _ = run(spec, tmp_path)
    rows = frame.set_index("method")
    own = arrays[rows.loc["laplace", "run_id"]]["training_probabilities"]
    target = arrays[rows.loc["sghmc", "run_id"]]["training_probabilities"]
    assert own.shape == (768, 2) and "test_nll" not in frame.columns
    assert rows.loc["laplace", "total_variation"] == pytest.approx(total_variation(own, target), rel=1e-12)


def test_regression_scores_w2_against_the_exact_posterior(tmp_path: Path) -> None:
    """Linear regression against the conjugate closed form at T = 0.1 and 1: W2 of the
    moment-matched Gaussian predictives, recomputed from the logged means and variances
    (σ² plus the variance of the samples' means)."""
    spec = {
        "name": "w2", "data": {"name": "csv", "path": "package:diabetes.csv", "target": "target"},
        "model": {"name": "linear"}, "likelihood": {"name": "gaussian", "noise_sd": 0.7},
        "prior": {"name": "diag_normal", "variance": 1.0}, "temperatures": [0.1, 1.0], "seeds": [0],
        "methods": {"exact": {"engine": "conjugate_linear"},
                    "vi": {"engine": "vi_diag", "epochs": 50, "batch_size": None}},
        "evaluate": {"n_samples": 20, "reference": "exact"}, "plots": [], "report": {"enabled": False},
    }
    frame, arrays, _ = run(spec, tmp_path)
    rows = frame.set_index(["method", "temperature"])
    for temperature in (0.1, 1.0):
        own = arrays[rows.loc[("vi", temperature), "run_id"]]
        target = arrays[rows.loc[("exact", temperature), "run_id"]]
        expected = gaussian_wasserstein_2(
            own["predictive_mean"], own["epistemic_variance"] + 0.49,
            target["predictive_mean"], target["epistemic_variance"] + 0.49,
        )
        assert rows.loc[("vi", temperature), "wasserstein_2"] == pytest.approx(expected, rel=1e-9)
        assert rows.loc[("vi", temperature), "wasserstein_2"] > 0
        assert "agreement" not in frame.columns
