"""With `noise_sd: auto` a loaded posterior and its pyfunc model predict with the noise the
fit chose (issue 33, item 1), as the evaluate stage does, not the spec's
`likelihood.noise_sd`: a linear regression on diabetes run for real into a SQLite store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import bayesflow
from bayesflow.data import load_dataset
from bayesflow.posterior import RegressionPrediction, load_posterior
from tests.stages.test_evidence_stage import REGRESSION

pytestmark = pytest.mark.slow

SPEC_NOISE = 0.3  # far from the σ* ≈ 0.69 the evidence chooses on diabetes


def gaussian_nll(mean: np.ndarray, variance: np.ndarray, targets: np.ndarray) -> float:
    """Mean over points of −log N(yᵢ; mᵢ, sᵢ²)."""
    return float(np.mean(0.5 * np.log(2 * math.pi * variance) + 0.5 * (targets - mean) ** 2 / variance))


def test_loaded_posterior_predicts_with_the_chosen_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`load_posterior(run).predict(x_test)` adds σ*², not the spec's σ²: in closed form
    (`closed_form`, exact for a linear model) its variance is x̃Σx̃ᵀ + σ*² and its NLL
    the run's logged `test_nll`; sampled, its Gaussian NLL is the logged mixture's within
    Monte Carlo error; the pyfunc model's `sd` is the same predictive's."""
    import mlflow.pyfunc

    from bayesflow.tracking import MlflowTracker
    from bayesflow.tracking.pyfunc import log_posterior_model

    monkeypatch.chdir(tmp_path)
    spec = yaml.safe_load(REGRESSION)
    spec["likelihood"]["noise_sd"] = SPEC_NOISE
    auto = spec["methods"]["laplace_auto"]
    spec["methods"]["laplace_probit"] = {**auto, "prediction": "closed_form"}
    spec.update({
        "temperatures": [1.0], "evaluate": {"n_samples": 2000},
        "execution": {"cache_dir": str(tmp_path / "cache")},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    })
    loaded = bayesflow.load(spec)
    result = bayesflow.run(loaded)
    assert result.exit_code == 0, result.outcome.errors
    uri = result.tracking_uri
    frame = bayesflow.results(result.run_id, tracking_uri=uri).set_index("method")
    data = load_dataset(loaded.spec.data.model_dump(), loaded.base_dir)
    x, y = np.asarray(data.x_test), np.asarray(data.y_test, dtype=np.float64)
    design = np.concatenate([x.astype(np.float64), np.ones((len(x), 1))], 1)

    # Closed form: exactly N(x̃θ*, x̃Σx̃ᵀ + σ*²), the evaluate stage's predictive.
    run = str(frame.loc["laplace_probit", "run_id"])
    noise = float(frame.loc["laplace_probit", "noise_sd_chosen"])
    assert abs(noise - SPEC_NOISE) > 0.1
    posterior = load_posterior(run, tracking_uri=uri)
    assert posterior.prediction == "closed_form"
    prediction = posterior.predict(x)
    assert isinstance(prediction, RegressionPrediction)
    assert posterior.posterior.cov is not None
    epistemic = np.einsum("ij,jk,ik->i", design, posterior.posterior.cov.double().numpy(), design)
    np.testing.assert_allclose(prediction.variance.numpy(), epistemic + noise**2, rtol=1e-5)
    logged = float(frame.loc["laplace_probit", "test_nll"])
    assert gaussian_nll(prediction.mean.numpy(), prediction.variance.numpy(), y) == pytest.approx(logged, abs=1e-4)
    assert abs(gaussian_nll(prediction.mean.numpy(), epistemic + SPEC_NOISE**2, y) - logged) > 0.5
    assert posterior.noise_sd == pytest.approx(noise)

    # Sampled: the logged NLL is the mixture over 2,000 draws; the Gaussian of its moments
    # is within ~1e-3 of it (x̃Σx̃ᵀ is under 9% of σ*²); the spec's σ is over 0.5 away.
    run = str(frame.loc["laplace_auto", "run_id"])
    noise = float(frame.loc["laplace_auto", "noise_sd_chosen"])
    sampled = load_posterior(run, tracking_uri=uri).predict(x)
    logged = float(frame.loc["laplace_auto", "test_nll"])
    assert gaussian_nll(sampled.mean.numpy(), sampled.variance.numpy(), y) == pytest.approx(logged, abs=3e-3)
    assert float((sampled.variance.numpy() - noise**2).min()) >= 0
    assert float((sampled.variance.numpy() - noise**2).max()) < 0.1 * noise**2

    # The pyfunc model: the same files, the same predictive.
    tracker = MlflowTracker(uri)
    record = tracker.get_run(run)
    local = tracker.download_artifact(run, "posterior/posterior.npz", tmp_path / run)
    with np.load(local) as archive:  # the fit's own file carries σ*, for every reader
        assert float(archive["noise_sd"]) == pytest.approx(noise)
    log_posterior_model(run, local, loaded.to_yaml(), record.params, uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model(f"runs:/{run}/model")
    predicted = model.predict(x)
    np.testing.assert_allclose(predicted["sd"].to_numpy() ** 2, sampled.variance.numpy(), rtol=1e-6)
    np.testing.assert_allclose(predicted["mean"].to_numpy(), sampled.mean.numpy(), rtol=1e-6)
