"""End to end: Pima as in the posteriors paper (Section 5.4, Table 3).

The shipped ``pima_logistic`` workflow, shrunk by overrides except for the 10,000 chains
of the paper's parallel SGHMC row, through the command line, MLflow and the report: no
intercept, all 768 rows for fitting, no predictive metrics (with the note saying why),
both KSDs, the distances to NUTS and the agreement of the predictives with NUTS's for
every sampled fit. A spec that asks for
predictive plots without held-out rows is refused at validate (exit 3).
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
BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]
SMALL = [
    "seeds=[0]", "evaluate.ksd.max_samples=200",
    "methods.nuts.warmup=100", "methods.nuts.num_samples=200", "methods.map.epochs=50",
    "methods.vi.epochs=5", "methods.sghmc_full_batch.epochs=300",
    "methods.sghmc_full_batch.burn_in=100", "methods.sghmc_batch_32.epochs=10",
    "methods.sghmc_batch_32.burn_in=100", "methods.parallel_sghmc.epochs=2",
    "methods.parallel_sghmc_10000.epochs=2",
]


def bayesflow(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line in ``cwd``, with what it printed."""
    return subprocess.run(
        [*BAYESFLOW, *args], cwd=cwd, capture_output=True, text=True, timeout=900,
        env={**os.environ, "COLUMNS": "200"}, check=False,
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The run's folder and each fit run (metrics, tags, posterior arrays) by method."""
    from mlflow.tracking import MlflowClient

    folder = tmp_path_factory.mktemp("pima")
    result = bayesflow(folder, "run", "pima_logistic", *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("pima_logistic")
    fits: dict[str, Any] = {}
    for run in client.search_runs([experiment.experiment_id]):
        if run.data.tags.get("bayesflow.role") == "parent":
            continue
        path = client.download_artifacts(run.info.run_id, "posterior/posterior.npz", str(folder))
        with np.load(path) as arrays:
            posterior = {name: arrays[name] for name in arrays.files}
        fits[run.data.params["method"]] = (run.data.metrics, run.data.tags, posterior)
    return folder, fits


def test_the_model_has_no_intercept_and_sees_every_row(finished: Any) -> None:
    """Eight coefficients and no bias; 768 training rows and none held out, so no
    predictive metric, and the note that says so on every fit."""
    _, fits = finished
    assert set(fits) == {
        "nuts", "map", "laplace", "vi", "sghmc_full_batch", "sghmc_batch_32",
        "parallel_sghmc", "parallel_sghmc_10000",
    }
    for method, (metrics, tags, posterior) in fits.items():
        assert list(posterior["param_names"]) == ["weight"], method
        assert not any(name.startswith("test_") for name in metrics), method
        assert "no held-out rows" in tags["convention.predictive"], method


def test_every_sampled_fit_has_both_ksds_and_its_distance_to_nuts(finished: Any) -> None:
    """`ksd` (the Stein discrepancy) and `ksd_posteriors_example` (the paper's estimator)
    for every fit at T = 1; the distances to NUTS for every fit but NUTS's own; the
    10,000-chain row keeps one state per chain."""
    _, fits = finished
    for method, (metrics, _, _) in fits.items():
        if method == "map":  # the T → 0 fit has no tempered target
            assert "ksd" not in metrics
            continue
        assert metrics["ksd"] > 0 and metrics["ksd_posteriors_example"] > 0, method
        assert ("reference_mean_error" in metrics) == (method != "nuts"), method
    assert fits["parallel_sghmc_10000"][2]["samples"].shape == (10_000, 8)
    # Their predictives against NUTS's on the 768 training rows (none are held out).
    for method, (metrics, tags, _) in fits.items():
        if method in ("nuts", "map"):  # the reference itself; the T → 0 fit has no T = 1 reference
            assert "agreement" not in metrics, method
            continue
        assert 0.9 < metrics["agreement"] <= 1 and 0 <= metrics["total_variation"] < 0.1, method
        assert "on the 768 training rows" in tags["convention.agreement"], method
    assert fits["laplace"][0]["total_variation"] < 0.02
    # Laplace's dense GGN is the exact Hessian of logistic regression: close to NUTS.
    assert fits["laplace"][0]["reference_mean_error"] < 0.5


def test_report_says_which_ksd(finished: Any) -> None:
    """The report shows both KSD columns, what they are, and why nothing is predicted."""
    folder, _ = finished
    reports = list((folder / "reports" / "pima_logistic").glob("*/report.html"))
    assert len(reports) == 1
    text = reports[0].read_text()
    assert "ksd_posteriors_example" in text and "V-statistic" in text and "Traceback" not in text
    assert "No rows were held out" in text
    assert "Agreement of the predictives" in text and "total_variation" in text and ">reference<" in text
    assert text.count("data:image/png;base64") >= 1


def test_predictive_plots_without_held_out_rows_are_refused(tmp_path: Path) -> None:
    """`plots: [nll_vs_temperature]` with `data.test_fraction: 0` is a spec error (exit 3)
    that names the key and the fix."""
    result = bayesflow(tmp_path, "validate", "pima_logistic", "plots=[nll_vs_temperature]")
    assert result.returncode == 3, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "plots" in output and "need held-out data" in output and "test_fraction" in output
