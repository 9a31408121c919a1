"""The tracking worker imports what logging needs (mlflow and its SQL store), not what
fitting needs: no torch, no transformers, no tokenizer (issue 33, item 16).

Each test runs a real workflow, then replays its stages' artefacts into a real worker
process, opened as ``bayesflow.run`` opens it (:func:`bayesflow.api.tracking_opener`),
and asks that process which of the fitting libraries it has imported. Before the fix a
language model on a folder's tokenizer (``data.tokenizer: model``) loaded the tokenizer
in the worker to learn the vocabulary (transformers, then torch: 413 MiB of private
memory against 195 MiB after), and a flat model's signature was built with torch.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import bayesflow
from bayesflow.api import prepare, tracking_opener
from bayesflow.dag.cache import Cache
from bayesflow.tracking import MlflowTracker
from bayesflow.tracking.background import BackgroundHook
from tests.conftest import TINY_SPEC, run_at_one_temperature
from tests.llm.spec_helpers import lm_spec

# What fitting imports and logging must not: each costs the worker its import's memory
# (torch about 145 MiB of private memory, transformers with its tokenizers about 45 MiB).
FITTING_LIBRARIES = ("torch", "transformers", "tokenizers", "peft", "safetensors", "sklearn")


def imported_fitting_libraries(hook: Any) -> list[str]:
    """Run on the worker (BackgroundHook.finish): the fitting libraries it imported."""
    return [name for name in FITTING_LIBRARIES if name in sys.modules]


def _replay(loaded: Any, folder: Path) -> tuple[list[str], str, MlflowTracker]:
    """Every stage of ``loaded``'s finished run logged again, by a worker process, to a new
    experiment; the fitting libraries that worker imported, the experiment, the tracker."""
    prepared = prepare(loaded)
    tracker = MlflowTracker(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = f"{loaded.spec.name}_replayed"
    worker = BackgroundHook(tracking_opener(prepared, tracker, experiment), process=True)
    cache = Cache(loaded.spec.execution.cache_dir)
    for stage in prepared.plan.order():
        entry = cache.get(stage.key)
        assert entry is not None, stage.name
        worker.after_stage(stage, entry, cached=False)
    return worker.finish(imported_fitting_libraries), experiment, tracker


def _logged_models(tracker: MlflowTracker, experiment: str) -> int:
    """How many fit runs of ``experiment`` hold a pyfunc model."""
    import mlflow

    client = mlflow.MlflowClient(tracker.uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], "tags.`bayesflow.role` = 'fit'")
    return sum("model" in {item.path for item in client.list_artifacts(run.info.run_id)} for run in runs)


@pytest.mark.slow  # a run, then a worker process importing mlflow
def test_logging_a_language_model_on_a_folder_tokenizer_imports_no_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped byte-level checkpoint with its own tokenizer (transformers'): the worker
    logs the fit and its text model without importing transformers or torch."""
    monkeypatch.chdir(tmp_path)
    spec = lm_spec(tmp_path)
    spec["data"].update({"tokenizer": "model", "length": 32, "stride": 32, "scored": 8})
    spec["model"] = {"name": "causal_lm", "path": "package:lm/checkpoint",
                     "trainable": {"parameters": ["model.layers.3.*"]}}
    loaded, _ = run_at_one_temperature(spec, tmp_path)
    imported, experiment, tracker = _replay(loaded, tmp_path)
    assert imported == []
    assert _logged_models(tracker, experiment) == 1


@pytest.mark.slow
def test_logging_a_flat_model_imports_no_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MLP on the digits: the pyfunc model's signature is read off the spec and the
    data's sizes, not computed with torch, and the data are not loaded again."""
    monkeypatch.chdir(tmp_path)
    spec = yaml.safe_load(TINY_SPEC)
    spec["methods"] = {"map": spec["methods"]["map"]}
    loaded, _ = run_at_one_temperature(spec, tmp_path)
    imported, experiment, tracker = _replay(loaded, tmp_path)
    assert imported == []
    assert _logged_models(tracker, experiment) == 1


@pytest.mark.parametrize("likelihood", ["categorical", "bernoulli", "gaussian"])
def test_the_signature_columns_are_the_predictions(likelihood: str) -> None:
    """The columns the worker writes into the signature (``output_columns``, from the spec)
    are those of the prediction frame the likelihood's own predictive gives."""
    import torch

    from bayesflow.likelihoods import build_likelihood
    from bayesflow.posterior import RegressionPrediction, read_spec
    from bayesflow.tracking.pyfunc import output_columns, prediction_frame

    spec = yaml.safe_load(TINY_SPEC)
    spec["likelihood"] = {"name": likelihood}
    parsed = read_spec(yaml.safe_dump(spec))
    built = build_likelihood(parsed.likelihood.model_dump())
    classes = 2 if likelihood == "bernoulli" else 10
    if built.task == "classification":
        frame = prediction_frame(built.probabilities(torch.zeros(3, built.num_outputs(classes))).double())
    else:
        frame = prediction_frame(RegressionPrediction(torch.zeros(3, dtype=torch.float64),
                                                      torch.ones(3, dtype=torch.float64)))
    assert output_columns(parsed, classes) == list(frame.columns)
    assert set(frame.dtypes.astype(str)) == {"float64"}


def test_a_run_hands_the_worker_the_data_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opener ``bayesflow.run`` gives its worker carries the loaded data's sizes (what
    a fit's model records), so the worker does not load the data to learn them."""
    monkeypatch.chdir(tmp_path)
    loaded = bayesflow.load(yaml.safe_load(TINY_SPEC))
    prepared = prepare(loaded)
    opener = tracking_opener(prepared, MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}"), "tiny")
    assert isinstance(opener, functools.partial) and opener.args[-1] == {"": {"num_features": 64, "num_classes": 10,
                          "input_dtype": prepared.dataset.x_train.dtype.str}}
