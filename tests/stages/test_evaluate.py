"""The evaluate stage's optional measures: KSD against the tempered target, distances to a
reference fit, and targets without data (the double well)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.tracking import InMemoryTracker

PIMA = {
    "name": "pima_small",
    "data": {"name": "csv", "path": "package:pima_indians_diabetes.csv", "target": "target"},
    "model": {"name": "logistic"},
    "likelihood": {"name": "bernoulli"},
    "prior": {"name": "diag_normal", "variance": 1.0},
    "temperatures": [1.0],
    "seeds": [0],
    "methods": {
        "map": {"engine": "map", "optimizer": {"name": "adam", "lr": 0.05}, "epochs": 100,
                "batch_size": None},
        "laplace": {"engine": "laplace_dense_ggn", "from": "map", "batch_size": None},
        "sghmc": {"engine": "sghmc", "lr": 0.1, "epochs": 400, "batch_size": None, "chains": 50,
                  "keep": "last"},
    },
    "evaluate": {"n_samples": 10, "ksd": {"max_samples": 200}, "reference": "sghmc"},
    "plots": [],
    "report": {"enabled": False},
}
DOUBLE_WELL = {
    "name": "well",
    "data": {"name": "none"},
    "model": {"name": "double_well", "barrier": 2.0},
    "likelihood": {"name": "energy"},
    "prior": {"name": "none"},
    "temperatures": [1.0],
    "methods": {"sghmc": {"engine": "sghmc", "lr": 0.01, "epochs": 200, "batch_size": None,
                          "chains": 4, "thin": 5}},
    "evaluate": {"ksd": {"max_samples": 100}},
    "plots": [],
    "report": {"enabled": False},
}


def run(spec: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Run a spec mapping into an in-memory tracker; return its results frame and tracker."""
    monkeypatch.chdir(tmp_path)
    tracker = InMemoryTracker(tmp_path / "artifacts")
    spec = {**spec, "execution": {"cache_dir": str(tmp_path / "cache")}}
    result = bayesflow.run(bayesflow.load(spec), tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    return bayesflow.results(result.run_id, tracker=tracker), tracker


def test_ksd_and_reference_distances_are_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fit at T > 0 gets `ksd`; every method but the reference and the T → 0 MAP gets
    its distances to the reference; Laplace (exact up to curvature here) lies close to it."""
    frame, _ = run(PIMA, tmp_path, monkeypatch)
    rows = frame.set_index("method")
    assert np.isnan(rows.loc["map", "ksd"]) and np.isnan(rows.loc["map", "reference_mean_error"])
    assert (rows.loc[["laplace", "sghmc"], "ksd"] > 0).all()
    assert np.isnan(rows.loc["sghmc", "reference_mean_error"])
    assert rows.loc["laplace", "reference_mean_error"] < 0.5
    assert 0 <= rows.loc["laplace", "reference_variance_error"] < 0.7  # within a factor 2


def test_double_well_is_sampled_without_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`none` data with the `energy` likelihood: no predictive metrics, a KSD, samples near ±1."""
    frame, tracker = run(DOUBLE_WELL, tmp_path, monkeypatch)
    (row,) = frame.itertuples()
    assert row.ksd > 0 and "test_nll" not in frame.columns
    parent = tracker.get_run(row.run_id).parent_id
    (arrays,) = bayesflow.posteriors(parent, tracker=tracker).values()
    samples = arrays["samples"]
    assert samples.shape[1] == 2
    assert 0.5 < np.median(np.abs(samples[:, 0])) < 1.5  # the modes are at θ₁ = ±1
    assert bayesflow.evaluations(parent, tracker=tracker) == {}


@pytest.mark.parametrize("prediction", ["linearized", "closed_form", "linearized_mc"])
def test_a_method_can_ask_for_linearized_prediction(tmp_path: Path, prediction: str) -> None:
    """`prediction: linearized…` on a Laplace method is used for it; samples stay sampled."""
    from bayesflow.engines.base import Posterior
    from bayesflow.stages.context import WorkflowContext
    from bayesflow.stages.evaluate import prediction_of
    from tests.conftest import TINY_SPEC, write

    spec = write(tmp_path, TINY_SPEC.replace("    from: map\n", f"    from: map\n    prediction: {prediction}\n"))
    prepared = bayesflow.prepare(bayesflow.load(spec))
    context = WorkflowContext(prepared.loaded, prepared.dataset)
    stages = prepared.plan.stages
    gaussian = Posterior(mean=torch.zeros(3), var=torch.ones(3))
    samples = Posterior(samples=torch.zeros(2, 3))
    assert prediction_of(context, stages["evaluate/laplace/T=1/seed=0"], gaussian) == prediction
    assert prediction_of(context, stages["evaluate/map/T=shared/seed=0"], gaussian) == "sampled"
    assert prediction_of(context, stages["evaluate/laplace/T=1/seed=0"], samples) == "sampled"


def test_validation_rows_get_the_test_metrics_as_val(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `data.validation_fraction` every fit logs `val_*` beside `test_*` (the same
    metrics), with their conventions; MAP's val NLL is the logistic NLL of its weights on
    the validation rows (closed form)."""
    from bayesflow.data import load_dataset

    data = {**PIMA["data"], "validation_fraction": 0.25}
    spec = {**PIMA, "data": data, "methods": {"map": PIMA["methods"]["map"]}, "evaluate": {"n_samples": 10}}
    frame, tracker = run(spec, tmp_path, monkeypatch)
    (row,) = frame.to_dict("records")
    tests = sorted(c.removeprefix("test_") for c in frame.columns if c.startswith("test_"))
    assert tests and sorted(c.removeprefix("val_") for c in frame.columns if c.startswith("val_")) == tests
    record = tracker.get_run(row["run_id"])
    assert "on the validation rows" in record.tags["convention.val_nll"]
    (arrays,) = bayesflow.posteriors(record.parent_id, tracker=tracker).values()
    dataset = load_dataset(data)
    features = dataset.num_features
    assert [name.rsplit(".", 1)[-1] for name in arrays["param_names"]] == ["weight", "bias"]
    weights, bias = arrays["mean"][:features], arrays["mean"][features]  # flat: 1×8 weight, then bias
    logits = dataset.x_validation.astype(np.float64) @ weights + bias
    labels = dataset.y_validation
    expected = np.mean(np.logaddexp(0.0, logits) - labels * logits)  # -log Bernoulli(y; sigmoid)
    assert row["val_nll"] == pytest.approx(expected, rel=1e-5)
    assert row["val_nll"] != pytest.approx(row["test_nll"], rel=1e-3)


def test_stage_keys_change_with_the_validation_split_only() -> None:
    """A spec without validation keeps every stage key of one that says 0; holding rows
    out changes the fits' and evaluations' keys."""

    def keys(**data: Any) -> dict[str, str]:
        spec = {**PIMA, "data": {**PIMA["data"], **data}}
        return {name: stage.key for name, stage in bayesflow.prepare(bayesflow.load(spec)).plan.stages.items()}

    plain, zero, held = keys(), keys(validation_fraction=0.0), keys(validation_fraction=0.2)
    assert plain == zero
    assert all(held[name] != plain[name] for name in plain if name.startswith(("fit/", "evaluate/")))
