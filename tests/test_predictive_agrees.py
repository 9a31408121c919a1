"""One predictive: ``load_posterior(run).predict(x_test)`` is, array for array, what the
evaluate stage computed and stored in the run's ``evaluation/evaluation.npz``, for every
kind of method: sampled (SGHMC chains, a deep ensemble's members), linearised (a Laplace
with the linearised predictive), a point (MAP), and closed form (a regression Laplace's
exact Gaussian, with the noise the evidence chose). The audit's table in docs/audit.md
cites this test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import bayesflow
from bayesflow.data import load_dataset
from bayesflow.posterior import load_posterior
from tests.conftest import TINY_SPEC, run_at_one_temperature
from tests.stages.test_evidence_stage import REGRESSION

pytestmark = pytest.mark.slow  # two real runs into SQLite stores

CLASSIFIERS = {
    "map": {"engine": "map", "optimizer": {"name": "adam", "lr": 0.01}, "epochs": 5},
    "laplace_linearized": {"engine": "laplace_diag_ggn", "from": "map", "prediction": "linearized"},
    "sghmc": {"engine": "sghmc", "lr": 0.001, "epochs": 3, "chains": 2, "keep": "all", "burn_in": 10},
    "deep_ensemble": {"engine": "deep_ensemble", "optimizer": {"name": "adam", "lr": 0.01}, "epochs": 2, "members": 3},
}


def _run(spec: dict, folder: Path) -> tuple[str, object, object]:
    loaded, result = run_at_one_temperature(spec, folder)
    data = load_dataset(loaded.spec.data.model_dump(), loaded.base_dir)
    return result.tracking_uri, bayesflow.results(result.run_id, tracking_uri=result.tracking_uri), data, result.run_id


def test_a_classifier_predicts_what_its_evaluate_stage_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Probabilities equal the stored ones, and their NLL is the logged test_nll."""
    monkeypatch.chdir(tmp_path)
    spec = yaml.safe_load(TINY_SPEC)
    spec.update({"methods": CLASSIFIERS, "evaluate": {"n_samples": 6}})
    uri, frame, data, parent = _run(spec, tmp_path)
    stored = bayesflow.evaluations(parent, tracking_uri=uri)
    for row in frame.to_dict("records"):
        probabilities = load_posterior(row["run_id"], tracking_uri=uri).predict(data.x_test).double().numpy()
        expected = stored[row["run_id"]]["probabilities"]
        np.testing.assert_allclose(probabilities, expected, rtol=1e-5, atol=1e-7, err_msg=row["method"])
        nll = -np.mean(np.log(probabilities[np.arange(len(data.y_test)), data.y_test]))
        assert nll == pytest.approx(row["test_nll"], abs=1e-5), row["method"]


def test_a_regression_predicts_what_its_evaluate_stage_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed form and sampled: the predictive mean and epistemic variance are the stored
    ones, and the total variance adds the chosen noise, not the spec's."""
    monkeypatch.chdir(tmp_path)
    spec = yaml.safe_load(REGRESSION)
    auto = spec["methods"]["laplace_auto"]
    spec["methods"]["laplace_closed"] = {**auto, "prediction": "closed_form"}
    spec["evaluate"] = {"n_samples": 50}
    uri, frame, data, parent = _run(spec, tmp_path)
    stored = bayesflow.evaluations(parent, tracking_uri=uri)
    for row in frame.to_dict("records"):
        posterior = load_posterior(row["run_id"], tracking_uri=uri)
        prediction = posterior.predict(data.x_test)
        arrays = stored[row["run_id"]]
        np.testing.assert_allclose(prediction.mean.double().numpy(), arrays["predictive_mean"], rtol=1e-5, atol=1e-6,
                                   err_msg=row["method"])
        chosen = row.get("noise_sd_chosen")
        chose = chosen is not None and not math.isnan(float(chosen))  # NaN: the fit kept the spec's noise
        assert (posterior.noise_sd == pytest.approx(float(chosen))) if chose else posterior.noise_sd is None
        noise = float(chosen) if chose else 0.7
        np.testing.assert_allclose(prediction.variance.double().numpy(), arrays["epistemic_variance"] + noise**2,
                                   rtol=1e-4, atol=1e-7, err_msg=row["method"])
