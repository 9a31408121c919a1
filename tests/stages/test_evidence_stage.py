"""Every Laplace fit logs its evidence; `prior_variance: auto` builds its posterior on the chosen prior."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import bayesflow
import bayesflow.variants
from bayesflow.dag.cache import Cache
from bayesflow.engines.base import Posterior
from bayesflow.engines.curvature import diagonal_ggn
from bayesflow.stages import POSTERIOR_FILE, StageRunner
from bayesflow.tracking import InMemoryTracker
from tests.conftest import write

SPEC = """\
name: evidence
data: {name: sklearn_digits, test_fraction: 0.5}
model: {name: mlp, hidden: [8]}
likelihood: {name: categorical}
prior: {name: diag_normal, variance: 1.0}
temperature_convention: CONVENTION
temperatures: [0.1, 1.0]
seeds: [0]
methods:
  map: {engine: map, optimizer: {name: adam, lr: 0.01}, epochs: 20}
  laplace: {engine: laplace_diag_ggn, from: map}
  laplace_auto: {engine: laplace_diag_ggn, from: map, prior_variance: auto}
  laplace_tensor: {engine: laplace_diag_ggn, from: map, prior_variance: auto_per_tensor}
evaluate: {n_samples: 4}
report: {enabled: false}
plots: []
"""


@pytest.mark.slow
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_laplace_fits_log_their_evidence_and_use_the_chosen_prior(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, convention: str
) -> None:
    """log_evidence is T-free under a shared mode; the auto posterior is T / (C + c/v*)."""
    monkeypatch.chdir(tmp_path)
    loaded = bayesflow.load(write(tmp_path, SPEC.replace("CONVENTION", convention)))
    result = bayesflow.run(loaded, tracker=InMemoryTracker())
    assert result.exit_code == 0, result.outcome.errors
    table = result.results().set_index(["method", "temperature"])
    spec_prior = table.loc["laplace", "log_evidence"]
    auto = table.loc["laplace_auto"]
    assert np.isfinite(spec_prior).all() and (auto["prior_variance_chosen"] > 0).all()
    assert (auto["log_evidence"] >= auto["log_evidence_spec_prior"]).all()
    np.testing.assert_allclose(auto["log_evidence_spec_prior"], spec_prior, rtol=1e-12)
    assert np.isnan(table.loc["laplace"].get("prior_variance_chosen", np.nan)).all()
    if convention == "posterior":  # one mode and curvature for every temperature
        assert spec_prior.nunique() == 1 and auto["prior_variance_chosen"].nunique() == 1
    plan = bayesflow.plan(loaded)
    cache = Cache(loaded.spec.execution.cache_dir)
    runner = StageRunner(loaded, bayesflow.variants.load_data(loaded))
    data = runner.dataset
    for temperature in (0.1, 1.0):
        stage = plan.stages[f"fit/laplace_auto/T={temperature:g}/seed=0"]
        posterior = Posterior.from_arrays(dict(np.load(cache.get(stage.key).file(POSTERIOR_FILE))))
        problem, _, tempering = runner.context.problem(stage)
        assert posterior.mean is not None and posterior.var is not None
        curvature = diagonal_ggn(problem, posterior.mean, (torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)))
        precision = tempering.prior_weight / float(auto.loc[temperature, "prior_variance_chosen"])
        torch.testing.assert_close(posterior.var, temperature / (curvature + precision), rtol=1e-4, atol=0)
        # One variance per tensor: each tensor's entries get its own.
        stage = plan.stages[f"fit/laplace_tensor/T={temperature:g}/seed=0"]
        posterior = Posterior.from_arrays(dict(np.load(cache.get(stage.key).file(POSTERIOR_FILE))))
        row = table.loc[("laplace_tensor", temperature)]
        variances = torch.cat([
            torch.full((math.prod(shape),), float(row[f"prior_variance_chosen/{name}"]))
            for name, shape in zip(problem.param_names, problem.param_shapes)
        ])
        assert row["log_evidence"] >= table.loc[("laplace_auto", temperature), "log_evidence"] - 1e-6
        assert posterior.var is not None
        expected = temperature / (curvature + tempering.prior_weight / variances)
        torch.testing.assert_close(posterior.var, expected, rtol=1e-4, atol=0)


REGRESSION = """\
name: evidence_regression
data: {name: csv, path: "package:diabetes.csv", target: target, test_fraction: 0.25, split_seed: 0}
model: {name: linear}
likelihood: {name: gaussian, noise_sd: 0.7}
prior: {name: diag_normal, variance: 1.0}
temperatures: [0.1, 1.0]
seeds: [0]
methods:
  map: {engine: map, optimizer: {name: adam, lr: 0.05}, epochs: 300, batch_size: null}
  laplace_auto: {engine: laplace_dense_ggn, from: map, batch_size: null, prior_variance: auto, noise_sd: auto}
evaluate: {n_samples: 4}
report: {enabled: false}
plots: []
"""


@pytest.mark.slow
def test_the_chosen_noise_rescales_a_regression_posterior(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear regression: the covariance is T · (XᵀX/σ*² + I/v*)⁻¹ with the chosen (v*, σ*)."""
    monkeypatch.chdir(tmp_path)
    loaded = bayesflow.load(write(tmp_path, REGRESSION))
    result = bayesflow.run(loaded, tracker=InMemoryTracker())
    assert result.exit_code == 0, result.outcome.errors
    table = result.results().set_index(["method", "temperature"]).loc["laplace_auto"]
    variance, noise = table.loc[1.0, "prior_variance_chosen"], table.loc[1.0, "noise_sd_chosen"]
    assert noise != pytest.approx(0.7, rel=1e-3) and table["noise_sd_chosen"].nunique() == 1
    plan = bayesflow.plan(loaded)
    cache = Cache(loaded.spec.execution.cache_dir)
    data = StageRunner(loaded, bayesflow.variants.load_data(loaded)).dataset
    design = torch.cat([torch.as_tensor(data.x_train), torch.ones(len(data.x_train), 1, dtype=torch.float64)], 1)
    precision = design.T @ design / noise**2 + torch.eye(design.shape[1], dtype=torch.float64) / variance
    for temperature in (0.1, 1.0):
        stage = plan.stages[f"fit/laplace_auto/T={temperature:g}/seed=0"]
        posterior = Posterior.from_arrays(dict(np.load(cache.get(stage.key).file(POSTERIOR_FILE))))
        assert posterior.cov is not None
        expected = temperature * torch.linalg.inv(precision)
        # float32 fits: entries agree to 1e-4 of the largest (near-zero covariances carry its rounding)
        torch.testing.assert_close(posterior.cov.double(), expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))
