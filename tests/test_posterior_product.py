"""The posterior as a product: ``bayesflow.load_posterior`` and the MLflow pyfunc model of a
fit, on a tiny workflow run for real into a SQLite MLflow store (one seed, one temperature,
a few epochs), plus a hand-made linear-regression posterior known in closed form."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

import bayesflow
from bayesflow.data import load_dataset
from bayesflow.posterior import (
    CELL_FILE,
    SPEC_FILE,
    NoDensityError,
    PosteriorError,
    RegressionPrediction,
    load_posterior,
)
from tests.conftest import TINY_SPEC

# Real workflow runs (MLflow, the report kernel): left out of `make test-fast`.
pytestmark = pytest.mark.slow

METHODS = {
    "map": {"engine": "map", "optimizer": {"name": "adam", "lr": 0.01}, "epochs": 5},
    "laplace": {"engine": "laplace_diag_ggn", "from": "map"},
    "laplace_dense": {"engine": "laplace_dense_ggn", "from": "map", "prediction": "linearized"},
    "sghmc": {"engine": "sghmc", "lr": 0.001, "epochs": 3, "chains": 2, "keep": "all", "burn_in": 10},
}
N_SAMPLES = 6


class Study:
    """A finished tiny workflow: its store, its fit runs by method, its test data."""

    def __init__(self, folder: Path) -> None:
        spec = yaml.safe_load(TINY_SPEC)
        spec.update({
            "temperatures": [1.0], "methods": METHODS, "plots": [], "report": {"enabled": False},
            "evaluate": {"n_samples": N_SAMPLES},
            "execution": {"cache_dir": str(folder / "cache")},
            "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}"},
        })
        loaded = bayesflow.load(spec)
        result = bayesflow.run(loaded)
        assert result.exit_code == 0, result.outcome.errors
        self.folder = folder
        self.uri = result.tracking_uri
        self.parent = result.run_id
        self.spec_yaml = loaded.to_yaml()
        self.frame = bayesflow.results(result.run_id, tracking_uri=self.uri)
        self.runs = dict(zip(self.frame["method"], self.frame["run_id"]))
        self.posteriors = bayesflow.posteriors(result.run_id, tracking_uri=self.uri)
        dataset = load_dataset(loaded.spec.data.model_dump(), loaded.base_dir)
        self.x_test, self.y_test = dataset.x_test, dataset.y_test

    def metric(self, method: str, name: str) -> float:
        return float(self.frame.set_index("method").loc[method, name])


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    """The tiny workflow, run once for the module, every fit's pyfunc model logged as the
    tracking hook logs it."""
    from bayesflow.tracking import MlflowTracker
    from bayesflow.tracking.pyfunc import log_posterior_model

    finished = Study(tmp_path_factory.mktemp("study"))
    tracker = MlflowTracker(finished.uri)
    for run_id in finished.runs.values():
        record = tracker.get_run(run_id)
        local = tracker.download_artifact(run_id, "posterior/posterior.npz", finished.folder / run_id)
        log_posterior_model(run_id, local, finished.spec_yaml, record.params, finished.uri)
    return finished


def accuracy(probabilities: torch.Tensor, labels: np.ndarray) -> float:
    return float((probabilities.argmax(-1).numpy() == labels).mean())


# ----------------------------------------------------------------- sampling


def test_sampler_draws_come_from_the_stored_samples(study: Study) -> None:
    """`sample(n)` of a sample set is (n, d), every row a stored sample, repeatable by seed."""
    posterior = load_posterior(study.runs["sghmc"], tracking_uri=study.uri)
    stored = torch.as_tensor(study.posteriors[study.runs["sghmc"]]["samples"])
    for count in (3, stored.shape[0] + 5):
        draw = posterior.sample(count, seed=0)
        assert draw.shape == (count, posterior.dimension) == (count, stored.shape[1])
        assert all(bool((stored == row).all(-1).any()) for row in draw)
    assert torch.equal(posterior.sample(3, seed=1), posterior.sample(3, seed=1))
    assert posterior.kind == "samples" and posterior.method == "sghmc"
    assert (posterior.engine, posterior.temperature, posterior.seed) == ("sghmc", 1.0, 0)
    assert list(posterior.param_names) == list(study.posteriors[study.runs["sghmc"]]["param_names"])


def test_gaussian_draws_have_the_stored_moments(study: Study) -> None:
    """`sample(n)` of a diagonal Gaussian has its stored mean and variance."""
    posterior = load_posterior(study.runs["laplace"], tracking_uri=study.uri)
    arrays = study.posteriors[study.runs["laplace"]]
    draw = posterior.sample(4000, seed=0).double()
    var = torch.as_tensor(arrays["var"]).double()
    standard_error = (var / 4000).sqrt()
    assert ((draw.mean(0) - torch.as_tensor(arrays["mean"])).abs() < 5 * standard_error + 1e-6).all()
    assert torch.allclose(draw.var(0), var, rtol=0.2, atol=1e-6)


# ---------------------------------------------------------------- densities


@pytest.mark.parametrize("method", ["laplace", "laplace_dense"])
def test_log_prob_peaks_at_the_mean_and_matches_torch(study: Study, method: str) -> None:
    """A Gaussian's `log_prob` is largest at its mean and equals torch.distributions on the
    stored mean and variance (or covariance)."""
    posterior = load_posterior(study.runs[method], tracking_uri=study.uri)
    arrays = study.posteriors[study.runs[method]]
    mean = torch.as_tensor(arrays["mean"])
    draws = posterior.sample(5, seed=0)
    scores = posterior.log_prob(draws)
    assert scores.shape == (5,) and bool((posterior.log_prob(mean) > scores).all())
    if "cov" in arrays:
        reference = torch.distributions.MultivariateNormal(mean, torch.as_tensor(arrays["cov"]))
        expected = reference.log_prob(draws)
    else:
        spread = torch.as_tensor(arrays["var"]).sqrt()
        expected = torch.distributions.Normal(mean, spread).log_prob(draws).sum(-1)
    torch.testing.assert_close(scores, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("method", "kind"), [("sghmc", "sample set"), ("map", "point estimate")])
def test_log_prob_without_a_density_says_what_to_use(study: Study, method: str, kind: str) -> None:
    """A sample set and a point estimate refuse `log_prob`, naming what to use instead."""
    posterior = load_posterior(study.runs[method], tracking_uri=study.uri)
    with pytest.raises(NoDensityError, match=f"is a {kind} and has no density; use sample"):
        posterior.log_prob(posterior.sample(1, seed=0))
    assert isinstance(NoDensityError("x"), NotImplementedError)


# --------------------------------------------------------------- prediction


@pytest.mark.parametrize("method", list(METHODS))
def test_predict_gives_the_logged_test_accuracy(study: Study, method: str) -> None:
    """`predict(x_test)` gives probabilities summing to 1 whose accuracy is the run's logged
    `test_accuracy`: exactly with the evaluate stage's seed (the default), and within Monte
    Carlo noise with another seed (same n_samples)."""
    posterior = load_posterior(study.runs[method], tracking_uri=study.uri)
    probabilities = posterior.predict(study.x_test)
    assert probabilities.shape == (len(study.y_test), 10)
    ones = torch.ones(len(study.y_test), dtype=torch.float64)
    torch.testing.assert_close(probabilities.sum(-1), ones, rtol=0, atol=1e-6)  # float32 softmax
    logged = study.metric(method, "test_accuracy")
    assert accuracy(probabilities, study.y_test) == pytest.approx(logged, abs=1e-9)
    # The logged value is one draw of N_SAMPLES samples: it lies within 4 sd of the
    # accuracies of other draws (the diagonal Laplace at T = 1 spreads most: sd 0.065 over
    # 30 seeds, measured; sample sets and MAP are subsampled evenly, sd 0).
    others = [
        accuracy(posterior.predict(study.x_test, N_SAMPLES, seed), study.y_test) for seed in range(1, 11)
    ]
    assert abs(logged - np.mean(others)) <= 4 * np.std(others) + 1e-9


def test_module_is_the_network_at_the_mean(study: Study) -> None:
    """`module()` of MAP is the network at its point estimate: its softmax is `predict`."""
    posterior = load_posterior(study.runs["map"], tracking_uri=study.uri)
    network = posterior.module()
    inputs = torch.as_tensor(study.x_test[:50])
    with torch.no_grad():
        expected = network(inputs).softmax(-1).double()
    torch.testing.assert_close(posterior.predict(inputs), expected)
    draw = posterior.sample(1, seed=0)[0]
    assert torch.equal(torch.nn.utils.parameters_to_vector(posterior.module(draw).parameters()), draw)
    with pytest.raises(PosteriorError, match=r"takes one flat parameter vector of shape \(610,\)"):
        posterior.module(posterior.sample(2, seed=0))


# ----------------------------------------------------------- pyfunc model


def test_pyfunc_model_predicts_as_load_posterior(study: Study, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlflow.pyfunc.load_model(runs:/<fit>/model).predict(frame)` is `predict` of
    `load_posterior` with the same seed, one column per class."""
    import mlflow.pyfunc
    import pandas as pd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", study.uri)
    model = mlflow.pyfunc.load_model(f"runs:/{study.runs['laplace']}/model")
    frame = pd.DataFrame(study.x_test[:40].astype(np.float64), columns=[f"pixel{i}" for i in range(64)])
    predicted = model.predict(frame, params={"n_samples": 8, "seed": 3})
    assert list(predicted.columns) == [f"class_{k}" for k in range(10)]
    expected = load_posterior(study.runs["laplace"]).predict(study.x_test[:40], n_samples=8, seed=3)
    np.testing.assert_allclose(predicted.to_numpy(), expected.numpy(), rtol=1e-6)
    default = model.predict(study.x_test[:40])  # float32 array; the evaluate stage's draw
    evaluated = load_posterior(study.runs["laplace"]).predict(study.x_test[:40])
    np.testing.assert_allclose(default.to_numpy(), evaluated.numpy())


def test_a_run_with_a_model_loads_without_the_data(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sizes come from the model's cell.json: the dataset is never loaded."""
    from bayesflow.posterior import files

    def refuse(*args: Any) -> None:
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr(files, "_sizes", refuse)
    posterior = load_posterior(study.runs["sghmc"], tracking_uri=study.uri)
    assert posterior.cell["num_features"] == 64 and posterior.cell["num_classes"] == 10


def test_a_downloaded_model_folder_loads_without_mlflow(study: Study, tmp_path: Path) -> None:
    """The fit's `model` folder, copied out of the store, loads in a process that never
    imports mlflow, and predicts what the run id predicts."""
    from bayesflow.tracking import MlflowTracker

    folder = MlflowTracker(study.uri).download_artifact(study.runs["laplace_dense"], "model", tmp_path)
    np.save(tmp_path / "x.npy", study.x_test[:30])
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import bayesflow
        posterior = bayesflow.load_posterior({str(folder)!r})
        probabilities = posterior.predict(np.load({str(tmp_path / 'x.npy')!r}))
        np.save({str(tmp_path / 'p.npy')!r}, probabilities.numpy())
        assert "mlflow" not in sys.modules, "mlflow was imported"
        print(posterior.method, posterior.prediction)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["laplace_dense", "linearized"]
    reference = load_posterior(study.runs["laplace_dense"], tracking_uri=study.uri)
    expected = reference.predict(study.x_test[:30])
    # Another process may split float32 matrix products over other threads: 1e-5, not 1e-7.
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected.numpy(), rtol=1e-5, atol=1e-7)


def test_a_posterior_file_beside_its_spec_loads_from_the_data(study: Study, tmp_path: Path) -> None:
    """`posterior.npz` with `resolved.yaml` beside it (no cell.json) loads; the sizes come
    from the spec's data."""
    shutil.copy(study.folder / study.runs["map"] / "posterior.npz", tmp_path / "posterior.npz")
    (tmp_path / SPEC_FILE).write_text(study.spec_yaml)
    posterior = load_posterior(tmp_path / "posterior.npz")
    assert posterior.method is None and posterior.cell["num_classes"] == 10
    reference = load_posterior(study.runs["map"], tracking_uri=study.uri)
    torch.testing.assert_close(posterior.predict(study.x_test), reference.predict(study.x_test))


# ----------------------------------------------------- closed form: regression


def regression_folder(folder: Path, prediction: str = "sampled") -> tuple[np.ndarray, np.ndarray]:
    """A linear-regression posterior N(mean, diag(var)) over (weight, bias) as the three
    files, its data file absent (the sizes are in cell.json); its VI predicts by ``prediction``."""
    from bayesflow.engines.base import Posterior
    from bayesflow.likelihoods import gaussian
    from bayesflow.priors import none
    from bayesflow.problem import build_problem

    spec = {
        "name": "line", "data": {"name": "csv", "path": "absent.csv", "target": "y"},
        "model": {"name": "linear"}, "likelihood": {"name": "gaussian", "noise_sd": 0.5},
        "prior": {"name": "diag_normal", "variance": 1.0}, "temperatures": [1.0],
        "methods": {"vi": {"engine": "vi_diag", "epochs": 1, "prediction": prediction}},
        "plots": [], "report": {"enabled": False},
    }
    (folder / SPEC_FILE).write_text(yaml.safe_dump(spec))
    mean = np.array([1.0, -2.0, 0.5], dtype=np.float32)  # weight (1, 2), bias (1,)
    var = np.array([0.04, 0.01, 0.09], dtype=np.float32)
    problem = build_problem(torch.nn.Linear(2, 1), gaussian(0.5), none(), num_data=1)
    arrays = Posterior(mean=torch.as_tensor(mean), var=torch.as_tensor(var)).to_arrays(problem)
    np.savez(folder / "posterior.npz", **arrays)  # type: ignore[arg-type]
    cell = {"method": "vi", "engine": "vi_diag", "temperature": 1.0, "seed": 0, "num_features": 2,
            "num_classes": None, "input_dtype": "<f4"}
    (folder / CELL_FILE).write_text(json.dumps(cell))
    return mean, var


def test_regression_predictive_is_the_closed_form(tmp_path: Path) -> None:
    """For y = w·x + b with w, b ~ N(mean, diag(var)) and noise σ, the predictive mean is
    mean·[x, 1] and its variance Σ var·[x, 1]² + σ² (within Monte Carlo error)."""
    mean, var = regression_folder(tmp_path)
    posterior = load_posterior(tmp_path)
    x = np.array([[0.0, 0.0], [1.0, 2.0], [-3.0, 1.0]], dtype=np.float32)
    prediction = posterior.predict(x, n_samples=20_000, seed=0)
    assert isinstance(prediction, RegressionPrediction)
    design = np.hstack([x, np.ones((3, 1), dtype=np.float32)])
    np.testing.assert_allclose(prediction.mean.numpy(), design @ mean, atol=0.02)
    np.testing.assert_allclose(prediction.variance.numpy(), (design**2) @ var + 0.25, rtol=0.05)
    network = posterior.module()
    assert isinstance(network, torch.nn.Linear)
    np.testing.assert_allclose(network.weight.detach().numpy(), mean[None, :2])


def test_closed_form_prediction_is_exact(tmp_path: Path) -> None:
    """Under `prediction: closed_form` a Gaussian regression predicts N(f, J Σ Jᵀ + σ²)
    with no sampling: exactly mean·[x, 1] and Σ var·[x, 1]² + σ²."""
    mean, var = regression_folder(tmp_path, "closed_form")
    posterior = load_posterior(tmp_path)
    assert posterior.prediction == "closed_form"
    x = np.array([[0.0, 0.0], [1.0, 2.0], [-3.0, 1.0]], dtype=np.float32)
    prediction = posterior.predict(x)
    design = np.hstack([x, np.ones((3, 1), dtype=np.float32)])
    np.testing.assert_allclose(prediction.mean.numpy(), design @ mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(prediction.variance.numpy(), (design**2) @ var + 0.25, rtol=1e-6)


# ------------------------------------------------------------------ errors


def fake_fit(study: Study, status: str, tags: dict[str, str] | None = None) -> str:
    """A fit run under the study's parent with no artifact, ended with ``status``."""
    from bayesflow.tracking import MlflowTracker

    tracker = MlflowTracker(study.uri)
    experiment = tracker.get_run(study.parent).experiment
    run_id = tracker.start_run(
        experiment, "fake", parent_id=study.parent, params={"method": "vi", "seed": 0},
        tags={"bayesflow.role": "fit", **(tags or {})},
    )
    tracker.end_run(run_id, status)
    return run_id


def test_a_parent_run_lists_its_fits(study: Study) -> None:
    """A parent run id names itself as such and lists the fit runs to pass instead."""
    message = "is the parent run of a `bayesflow run`, not a fit; pass one of its fit runs"
    with pytest.raises(PosteriorError, match=message) as error:
        load_posterior(study.parent, tracking_uri=study.uri)
    assert all(run_id in str(error.value) for run_id in study.runs.values())


def test_errors_say_what_to_pass(study: Study, tmp_path: Path) -> None:
    """An unknown run, a failed fit, a fit without a posterior, a bad source and a missing
    store each raise a PosteriorError saying what to pass instead."""
    cases = [
        ("0" * 32, f"no run {'0' * 32} in {study.uri}; pass tracking_uri="),
        (fake_fit(study, "FAILED", {"bayesflow.error": "diverged at step 3"}),
         "is FAILED, not FINISHED: diverged at step 3; it saved no posterior. Pick a finished fit"),
        (fake_fit(study, "FINISHED"), "has no posterior/posterior.npz"),
        ("not-a-run", "is neither an existing file or folder nor an MLflow run id"),
    ]
    for source, message in cases:
        with pytest.raises(PosteriorError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_posterior(source, tracking_uri=study.uri)
    with pytest.raises(PosteriorError, match="no MLflow store at sqlite:///.*; run from the folder"):
        load_posterior("0" * 32, tracking_uri=f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(PosteriorError, match="lacks posterior.npz and resolved.yaml; pass a folder"):
        load_posterior(tmp_path)
    assert not (tmp_path / "none.db").exists()
