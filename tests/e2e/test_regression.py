"""End to end: the ``linear_regression`` workflow against its closed form.

One run of the shipped workflow (one seed; every method as shipped) through the command
line, the real MLflow store, the default plots and the default report. The exact tempered
posterior is computed here again in numpy, independently of the engines, and every
method's posterior (read back from MLflow) is held to a stated tolerance of it at both
temperatures of the workflow.

Tolerances (in reference standard deviations for means, mean |log variance ratio| for
variances), from the runs measured when the workflow was written (seed 0; in brackets):

- ``exact``: the numpy closed form to float32 rounding;
- ``laplace``: 0.05 for both (0.00: the GGN of a linear-gaussian model is its Hessian, so
  only the MAP's convergence is left);
- ``vi`` (mean-field): mean 0.15 (0.02), and its variances within 10% on average (25%
  at worst) of the mean-field optimum T / diag(precision) (measured 1-5%, 12% at
  worst), which is as far from the exact marginals as the correlated features put it;
- ``sghmc`` (full batch, about ten independent samples): mean 0.6 (0.24), variance 0.5
  (0.19);
- ``parallel_sghmc`` (100 chains, last states): mean 0.35 (0.08), variance 0.4 (0.20).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.e2e
NOISE_SD, PRIOR_VARIANCE = 0.7, 1.0


def exact(temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the tempered posterior (whole posterior tempered), with the
    parameters in the linear model's order: the 10 weights, then the intercept."""
    from bayesflow.data.tabular import csv

    data = csv("package:diabetes.csv", "target", test_fraction=0.25, split_seed=0)
    inputs = np.c_[data.x_train.astype(np.float64), np.ones(len(data.x_train))]
    precision = inputs.T @ inputs / NOISE_SD**2 + np.eye(inputs.shape[1]) / PRIOR_VARIANCE
    mean = np.linalg.solve(precision, inputs.T @ data.y_train.astype(np.float64) / NOISE_SD**2)
    return mean, temperature * np.linalg.inv(precision)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, float], Any]]:
    """The run's folder and each fit run's (metrics, posterior arrays) by (method, T)."""
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("regression")
    result = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", "run", "linear_regression", "seeds=[0]"],
        cwd=folder, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linear_regression")
    runs = client.search_runs([experiment.experiment_id])
    cells: dict[tuple[str, float], Any] = {}
    for run in runs:
        if run.data.tags.get("bayesflow.role") == "parent":
            continue
        path = client.download_artifacts(run.info.run_id, "posterior/posterior.npz", str(folder))
        with np.load(path) as arrays:
            posterior = {name: arrays[name] for name in arrays.files}
        key = (run.data.params["method"], float(run.data.params["temperature"]))
        cells[key] = (run.data.metrics, posterior)
    return folder, cells


def moments(posterior: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variances of a posterior.npz of any form."""
    if "samples" in posterior:
        return posterior["samples"].mean(0), posterior["samples"].var(0, ddof=1)
    spread = posterior["cov"].diagonal() if "cov" in posterior else posterior["var"]
    return posterior["mean"], spread


def errors(posterior: dict[str, np.ndarray], temperature: float) -> tuple[float, float]:
    """(mean error, variance error) against the numpy closed form."""
    mean, variance = moments(posterior)
    true_mean, cov = exact(temperature)
    sd = np.sqrt(cov.diagonal())
    mean_error = float(np.sqrt((((mean - true_mean) / sd) ** 2).mean()))
    return mean_error, float(np.abs(np.log(variance / cov.diagonal())).mean())


TEMPERATURES = [0.1, 1.0]


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_the_exact_method_is_the_closed_form(finished: Any, temperature: float) -> None:
    """The exact method's posterior, read back from MLflow, is the numpy closed form."""
    _, posterior = finished[1][("exact", temperature)]
    true_mean, cov = exact(temperature)
    np.testing.assert_allclose(posterior["mean"], true_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(posterior["cov"], cov, rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize(
    ("method", "mean_tolerance", "variance_tolerance"),
    [("laplace", 0.05, 0.05), ("sghmc", 0.6, 0.5), ("parallel_sghmc", 0.35, 0.4)],
)
def test_methods_are_close_to_the_exact_posterior(
    finished: Any, method: str, mean_tolerance: float, variance_tolerance: float,
    temperature: float,
) -> None:
    """Laplace, SGHMC and parallel SGHMC are within their stated tolerances, and the
    distances the run logged (against `exact`) are the ones computed here."""
    metrics, posterior = finished[1][(method, temperature)]
    mean_error, variance_error = errors(posterior, temperature)
    assert mean_error < mean_tolerance and variance_error < variance_tolerance, (
        method, temperature, mean_error, variance_error,
    )
    # The run measured against its own `exact` posterior, computed in the model's float32;
    # this test against numpy's float64 closed form. The two distances differ by at most
    # the distance between the two references (the triangle inequality; for the mean, plus
    # the references' relative spread in σ): float32 rounding of XᵀX over the training
    # rows, amplified by the precision's conditioning, and larger or smaller with the CPU's
    # kernels (1.2e-4 in log variance under ATEN_CPU_CAPABILITY=default, under the 1e-4
    # this test allowed before at AVX-512).
    _, reference = finished[1][("exact", temperature)]
    mean_drift, variance_drift = errors(reference, temperature)
    assert metrics["reference_mean_error"] == pytest.approx(
        mean_error, rel=1e-3 + variance_drift, abs=1e-4 + mean_drift
    )
    assert metrics["reference_variance_error"] == pytest.approx(
        variance_error, rel=1e-3, abs=1e-4 + variance_drift
    )


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_mean_field_vi_finds_the_mean_field_optimum(finished: Any, temperature: float) -> None:
    """VI's mean is the exact mean and its variances are T / diag(precision), the best a
    diagonal Gaussian can do (Bishop, 2006, Section 10.1.2), not the exact marginals."""
    _, posterior = finished[1][("vi", temperature)]
    _, cov = exact(temperature)
    optimum = 1 / np.linalg.inv(cov).diagonal()
    mean_error, _ = errors(posterior, temperature)
    assert mean_error < 0.15
    ratios = np.log(posterior["var"] / optimum)
    assert np.abs(ratios).mean() < 0.1 and np.abs(ratios).max() < 0.25, ratios
    assert (optimum < cov.diagonal()).all()  # the features are correlated


def test_report_shows_rmse_and_every_method(finished: Any) -> None:
    """The default plots and report ran: RMSE (the regression metric) in report.html,
    with a figure and a row for every method."""
    folder, cells = finished
    reports = list((folder / "reports" / "linear_regression").glob("*/report.html"))
    assert len(reports) == 1
    text = reports[0].read_text()
    assert "RMSE" in text.replace("NLL and RMSE, at T", "") and "test_rmse" in text
    assert text.count("data:image/png;base64") >= 1 and "Traceback" not in text
    assert {method for method, _ in cells} <= {
        "exact", "map", "laplace", "vi", "sghmc", "sghmc_batch_32", "parallel_sghmc"
    }
    assert all(metrics["test_rmse"] > 0 for metrics, _ in cells.values())
