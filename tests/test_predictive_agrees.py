"""One predictive: ``load_posterior(run).predict(x_test)`` is, array for array, what the
evaluate stage computed and stored in the run's ``evaluation/evaluation.npz``, for every
kind of method: sampled (SGHMC chains, a deep ensemble's members), linearised (a Laplace
with the linearised predictive), a point (MAP), and closed form (a regression Laplace's
exact Gaussian, with the noise the evidence chose), and for the language-model families
(next-token windows and multiple-choice questions: a point, sampled chains, an ensemble's
members and a Laplace's Gaussian, which a language model samples: linearised predictions
are refused there). The audit's table in docs/audit.md cites this test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import bayesflow
from bayesflow.data import load_dataset
from bayesflow.evaluate.uncertainty import entropy
from bayesflow.posterior import load_posterior
from tests.conftest import TINY_SPEC, run_at_one_temperature
from tests.llm.spec_helpers import lm_spec
from tests.llm.test_multiple_choice import choice_spec
from tests.numerics import reordered, sum_tolerance
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


# The language-model families' methods (tiny config-built Llama with LoRA, byte tokens).
ADAMW = {"name": "adamw", "lr": 0.01}
TEXT_METHODS = {
    "map": {"engine": "map", "optimizer": ADAMW, "epochs": 1, "batch_size": 8},
    "sghmc": {"engine": "sghmc", "lr": 0.001, "epochs": 2, "batch_size": 8, "chains": 2, "keep": "all"},
    "ensemble": {"engine": "deep_ensemble", "optimizer": ADAMW, "epochs": 1, "batch_size": 8, "members": 2},
    "kfac": {"engine": "laplace_kfac_fisher", "from": "map"},
}
CHOICE_METHODS = {
    "map": {"engine": "map", "optimizer": ADAMW, "epochs": 2, "batch_size": 4},
    "ensemble": {"engine": "deep_ensemble", "optimizer": ADAMW, "epochs": 2, "batch_size": 4, "members": 2},
    "laplace": {"engine": "laplace_diag_ggn", "from": "map"},
}


def _agrees_with_its_run(spec: dict, folder: Path, methods: dict) -> dict[str, np.ndarray]:
    """Run ``spec`` with ``methods``; for each fit, ``load_posterior(run id)`` predicts the
    test inputs (the evaluate stage's draw), and the NLL, the accuracy and the total
    uncertainty of that predictive are the run's logged ``test_nll``, ``test_accuracy`` and
    stored ``uncertainty_total``. The predictions by method."""
    from bayesflow.variants import load_data

    spec.update({"methods": methods, "evaluate": {"n_samples": 4}})
    loaded, result = run_at_one_temperature(spec, folder)
    data = load_data(loaded)
    frame = bayesflow.results(result.run_id, tracking_uri=result.tracking_uri)
    stored = bayesflow.evaluations(result.run_id, tracking_uri=result.tracking_uri)
    assert sorted(frame["method"]) == sorted(methods)
    labels = np.asarray(data.y_test)
    predictions = {}
    for row in frame.to_dict("records"):
        posterior = load_posterior(row["run_id"], tracking_uri=result.tracking_uri)
        probabilities = posterior.predict(data.x_test).double().numpy()  # (n, [scored,] C)
        arrays = stored[row["run_id"]]
        chosen = np.take_along_axis(probabilities, labels[..., None], axis=-1)[..., 0]
        tolerance = sum_tolerance(np.float64, labels.size)  # a mean over every scored label
        assert -np.log(chosen).mean() == pytest.approx(row["test_nll"], rel=tolerance, abs=tolerance), row["method"]
        assert (probabilities.argmax(-1) == labels).mean() == row["test_accuracy"], row["method"]
        np.testing.assert_array_equal(arrays["labels"], labels.reshape(-1), err_msg=row["method"])
        np.testing.assert_allclose(entropy(probabilities).reshape(-1), arrays["uncertainty_total"],
                                   **reordered(np.float32, probabilities.shape[-1]), err_msg=row["method"])
        if "probabilities" in arrays:
            np.testing.assert_allclose(probabilities, arrays["probabilities"], err_msg=row["method"],
                                       **reordered(np.float32, probabilities.shape[-1]))
        predictions[row["method"]] = probabilities
    return predictions


def test_a_language_model_predicts_what_its_evaluate_stage_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Next-token windows: MAP (a point), SGHMC (two chains, every state), a deep ensemble
    and KFAC Laplace (its Gaussian sampled) from their run ids: the token NLL, accuracy and
    total uncertainty of ``predict`` are the run's."""
    monkeypatch.chdir(tmp_path)
    predictions = _agrees_with_its_run(lm_spec(tmp_path), tmp_path, TEXT_METHODS)
    # Not one predictive four times: the chains, the members and the Gaussian's draws differ.
    assert len({prediction.tobytes() for prediction in predictions.values()}) == len(TEXT_METHODS)


def test_multiple_choice_predicts_what_its_evaluate_stage_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Questions: MAP, a deep ensemble and a diagonal Laplace from their run ids: the
    choices' probabilities are the stored ones, their NLL and accuracy the logged ones."""
    monkeypatch.chdir(tmp_path)
    predictions = _agrees_with_its_run(choice_spec(tmp_path), tmp_path, CHOICE_METHODS)
    assert len({prediction.tobytes() for prediction in predictions.values()}) == len(CHOICE_METHODS)
