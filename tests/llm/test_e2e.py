"""End to end through the command line: a tiny config-built Llama with LoRA on byte windows
of three short documents, fitted by MAP, SGHMC (2 chains, two temperatures) and a deep
ensemble; the MLflow runs, the posterior product and the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import bayesflow
from bayesflow.llm.product import load_lm_posterior
from bayesflow.posterior import PosteriorError
from tests.llm.spec_helpers import lm_spec, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    folder = tmp_path_factory.mktemp("lm_e2e")
    spec = lm_spec(folder)
    spec["data"]["validation_fraction"] = 0.15
    spec["temperatures"] = [0.1, 1.0]
    spec["methods"] = {
        "map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 8},
        "sghmc": {"engine": "sghmc", "lr": 0.001, "epochs": 2, "batch_size": 8, "chains": 2},
        "ensemble": {"engine": "deep_ensemble", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2,
                     "batch_size": 8, "members": 2},
    }
    spec["plots"] = ["nll_vs_temperature"]
    spec["report"] = {"enabled": True}
    spec["tracking"] = {"uri": "sqlite:///mlflow.db"}
    write_spec(folder, spec)
    result = subprocess.run([sys.executable, "-m", "bayesflow.cli", "run", "spec.yaml"], cwd=folder,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    import mlflow

    store = mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = store.get_experiment_by_name("lm_tiny")
    fits = [run for run in store.search_runs([experiment.experiment_id])
            if run.data.tags.get("bayesflow.role") == "fit"]
    return folder, store, fits


def test_every_cell_logs_token_metrics_on_test_and_validation_windows(finished: Any) -> None:
    _, _, fits = finished
    cells = sorted((run.data.params["method"], run.data.params["temperature"]) for run in fits)
    assert cells == [("ensemble", "0.0"), ("map", "0.0"), ("sghmc", "0.1"), ("sghmc", "1.0")]
    for run in fits:
        metrics = run.data.metrics
        assert metrics["test_perplexity"] == pytest.approx(np.exp(metrics["test_nll"]), rel=1e-9)
        assert 0 < metrics["test_nll"] < 10 and 0 <= metrics["test_accuracy"] <= 1
        assert {"val_nll", "val_accuracy", "val_perplexity", "test_ece", "test_nll_single"} <= set(metrics)
        assert "every scored token" in run.data.tags["convention.test_nll"]


def test_the_posterior_is_the_trainable_part_and_loads_back(finished: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fit logs its posterior over the LoRA tensors with base_model.json and a pyfunc
    model that scores texts; load_posterior (from the workflow's folder, as for any run's relative data paths)
    predicts the logged test NLL again, and the downloaded folder is a load_lm_posterior source."""
    folder, store, fits = finished
    monkeypatch.chdir(folder)
    run = next(run for run in fits if run.data.params["method"] == "ensemble")
    artifacts = {item.path for item in store.list_artifacts(run.info.run_id)}
    assert "model" in artifacts
    posterior = bayesflow.load_posterior(run.info.run_id, tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    assert all(".lora_" in name for name in posterior.param_names)
    dataset = bayesflow.prepare(bayesflow.load(folder / "spec.yaml")).dataset
    probabilities = posterior.predict(dataset.x_test)  # (n, S, V), the evaluate stage's draw
    chosen = probabilities.gather(-1, torch.as_tensor(dataset.y_test).unsqueeze(-1)).squeeze(-1)
    assert float(-chosen.log().mean()) == pytest.approx(run.data.metrics["test_nll"], rel=1e-6)
    local = Path(store.download_artifacts(run.info.run_id, "posterior", str(folder / "download")))
    reference = json.loads((local / "base_model.json").read_text())
    assert reference["scored"] == 8 and reference["model"]["family"] == "llama"
    with pytest.raises(PosteriorError, match="a language model's posterior .*load_lm_posterior"):
        bayesflow.load_posterior(local)
    loaded = load_lm_posterior(local, folder)
    assert loaded.problem.param_names == tuple(posterior.param_names)
    torch.testing.assert_close(loaded.posterior.samples, posterior.posterior.samples)


def test_the_report_renders_for_a_language_model(finished: Any) -> None:
    folder, _, _ = finished
    (report,) = (folder / "reports" / "lm_tiny").glob("*/report.html")
    text = report.read_text()
    assert "Traceback" not in text and "every scored token of every held-out window is one point" in text
    assert "a language model's frozen weights are not drawn" in text
    assert ">test_perplexity<" in text  # in the results table, beside the NLL
