"""The pyfunc model of a fit written from a saved template (``tracking/pyfunc.py``): each
fit's model loads with ``mlflow.pyfunc.load_model`` and predicts its own posterior, and its
files are what ``mlflow.pyfunc.save_model`` writes, but for the MLmodel's uuid, creation
time, source paths and size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from bayesflow.posterior import load_posterior
from tests.conftest import TINY_SPEC, run_at_one_temperature

# A real workflow run into a SQLite MLflow store.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str], str, Path]:
    """The tiny workflow at one temperature (MAP, Laplace, SGHMC): store, runs by method,
    resolved spec, folder."""
    folder = tmp_path_factory.mktemp("pyfunc")
    spec = yaml.safe_load(TINY_SPEC)
    loaded, result = run_at_one_temperature(spec, folder)
    runs = {name.split("/")[1]: run_id for name, run_id in result.fit_runs.items()}
    return result.tracking_uri, runs, loaded.to_yaml(), folder


def _model_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_fit_model_predicts_its_own_posterior(
    finished: tuple[str, dict[str, str], str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three fits logged in one process (the later ones from the template): each model's
    prediction is its own run's ``load_posterior`` prediction, and their uuids differ."""
    import mlflow.pyfunc
    from mlflow.models import Model

    uri, runs, _, folder = finished
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    features = np.random.default_rng(0).uniform(0, 16, size=(12, 64))
    predictions, uuids = {}, set()
    for method, run_id in runs.items():
        model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
        predicted = model.predict(features, params={"n_samples": 4, "seed": 2}).to_numpy()
        expected = load_posterior(run_id, tracking_uri=uri).predict(features, n_samples=4, seed=2)
        np.testing.assert_allclose(predicted, expected.numpy(), rtol=1e-6)
        predictions[method] = predicted
        local = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/model/MLmodel", dst_path=str(folder / run_id))
        uuids.add(Model.load(local).model_uuid)
    assert len(uuids) == len(runs) == 3
    assert not np.allclose(predictions["map"], predictions["sghmc"])


def test_a_model_from_the_template_has_save_models_files(
    finished: tuple[str, dict[str, str], str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no template, ``save_model`` writes the model; from the template, the same files
    with the same content but for the MLmodel fields that name this fit."""
    from mlflow.models import Model

    from bayesflow.tracking import MlflowTracker, pyfunc

    uri, runs, spec_yaml, _ = finished
    tracker = MlflowTracker(uri)
    run_id = runs["laplace"]
    record = tracker.get_run(run_id)
    posterior = tracker.download_artifact(run_id, "posterior/posterior.npz", tmp_path / "posterior")
    folders = {}
    for how in ("saved", "template"):
        if how == "saved":
            monkeypatch.setattr(pyfunc, "_TEMPLATES", {})
        else:
            assert pyfunc._TEMPLATES, "the saved model was not kept as a template"
        target = tracker.start_run("templates", how)
        pyfunc.log_posterior_model(target, posterior, spec_yaml, record.params, uri)
        folders[how] = tracker.download_artifact(target, "model", tmp_path / how)
    saved, copied = (_model_files(folders[how]) for how in ("saved", "template"))
    assert saved.keys() == copied.keys()
    assert {name for name in saved if saved[name] != copied[name]} <= {"MLmodel", "artifacts/cell.json"}
    described = [Model.load(str(folders[how] / "MLmodel")).to_dict() for how in ("saved", "template")]
    assert described[0]["model_uuid"] != described[1]["model_uuid"]
    assert described[1]["flavors"]["python_function"]["artifacts"]["posterior"]["uri"] == str(posterior)
    for entry in described:
        for field in ("model_uuid", "utc_time_created", "model_size_bytes"):
            entry.pop(field)
        for artifact in entry["flavors"]["python_function"]["artifacts"].values():
            artifact.pop("uri")
        entry["flavors"]["python_function"].pop("model_code_path")
    assert described[0] == described[1]


def test_requirements_name_a_package_run_from_source_unpinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """bayesflow run from a folder on PYTHONPATH (no installed metadata) is named without a
    version; the installed packages keep their pins (this crashed every fit's model once)."""
    from importlib import metadata

    from bayesflow.tracking import pyfunc

    real = metadata.version

    def version(name: str) -> str:
        if name == "bayesflow-workflows":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    pyfunc._requirements.cache_clear()
    try:
        found = pyfunc._requirements()
    finally:
        pyfunc._requirements.cache_clear()
    assert found[0] == "bayesflow-workflows"
    assert found[1] == f"torch=={real('torch')}" and found[2].startswith("mlflow==")
