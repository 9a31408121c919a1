"""End to end: agreement and total variation against a NUTS reference through the command
line, the real MLflow store and the report; a bad reference file refused at validate
(exit 3) with the key's line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bayesflow.evaluate.agreement import agreement, total_variation
from tests.e2e.test_cli import bayesflow, client

pytestmark = pytest.mark.e2e
SPEC = """\
name: agreement
data: {name: csv, path: "package:pima_indians_diabetes.csv", target: target}
model: {name: logistic}
likelihood: {name: bernoulli}
prior: {name: diag_normal, variance: 1.0}
temperatures: [1.0]
seeds: [0]
methods:
  nuts: {engine: nuts, warmup: 50, num_samples: 100}
  map: {engine: map, optimizer: {name: adam, lr: 0.05}, epochs: 100, batch_size: null}
  laplace: {engine: laplace_dense_ggn, from: map, batch_size: null}
  sghmc: {engine: sghmc, lr: 0.1, epochs: 200, batch_size: null, chains: 20, keep: last}
evaluate:
  n_samples: 20
  reference: {method: nuts}
plots: []
tracking: {uri: "sqlite:///mlflow.db"}
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The run's folder and each fit run's (metrics, tags, evaluation arrays) by method."""
    folder = tmp_path_factory.mktemp("agreement")
    (folder / "spec.yaml").write_text(SPEC)
    result = bayesflow(folder, "run", "spec.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    store = client(folder)
    experiment = store.get_experiment_by_name("agreement")
    fits: dict[str, Any] = {}
    for run in store.search_runs([experiment.experiment_id]):
        if run.data.tags.get("bayesflow.role") == "parent":
            continue
        path = store.download_artifacts(run.info.run_id, "evaluation/evaluation.npz", str(folder / run.info.run_id))
        with np.load(path) as arrays:
            probabilities = arrays["probabilities"]
        fits[run.data.params["method"]] = (run.data.metrics, run.data.tags, probabilities)
    return folder, fits


def test_the_store_holds_each_fits_scores_against_nuts(finished: Any) -> None:
    """Laplace and SGHMC log `agreement` and `total_variation`, equal to the scores of their
    logged predictive against NUTS's; NUTS is tagged as the reference; the T → 0 MAP has
    no tempered reference."""
    _, fits = finished
    reference = fits["nuts"][2]
    for method in ("laplace", "sghmc"):
        metrics, tags, probabilities = fits[method]
        assert metrics["agreement"] == pytest.approx(agreement(probabilities, reference), rel=1e-12)
        assert metrics["total_variation"] == pytest.approx(total_variation(probabilities, reference), rel=1e-12)
        assert 0.9 < metrics["agreement"] <= 1 and 0 < metrics["total_variation"] < 0.1, method
        assert "against the predictive of 'nuts'" in tags["convention.total_variation"]
    assert "agreement" not in fits["nuts"][0] and "agreement" not in fits["map"][0]
    assert fits["nuts"][1]["convention.reference"].startswith("this fit is evaluate.reference")


def test_the_report_shows_the_agreement(finished: Any) -> None:
    """The report's section names the reference and marks its row."""
    folder, _ = finished
    (report,) = (folder / "reports" / "agreement").glob("*/report.html")
    text = report.read_text()
    assert "Agreement with the reference" in text and "total_variation" in text
    assert ">reference<" in text and "Traceback" not in text


def test_a_bad_reference_file_is_refused_at_validate(tmp_path: Path) -> None:
    """Probabilities whose rows do not match the 192 test rows: exit 3, at the key's line."""
    (tmp_path / "probs.csv").write_text("0.5,0.5\n" * 10)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("reference: {method: nuts}", "reference: {file: probs.csv}"))
    result = bayesflow(tmp_path, "validate", "spec.yaml")
    assert result.returncode == 3, result.stdout + result.stderr
    output = " ".join((result.stdout + result.stderr).split())
    assert "spec.yaml:15:15: evaluate.reference.file: probs.csv" in output
    assert "has 10 rows, but the fits are compared on 192 test rows" in output
