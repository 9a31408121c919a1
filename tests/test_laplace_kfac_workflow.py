"""KFAC Laplace in a real workflow: the shared curvature pass, a last-layer subset, the
``posterior.npz`` it writes and ``load_posterior(...).log_prob`` on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import bayesflow
from bayesflow.engines.base import Posterior
from bayesflow.posterior import load_posterior
from tests.conftest import TINY_SPEC

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

METHODS = {
    "map": {"engine": "map", "optimizer": {"name": "adam", "lr": 0.01}, "epochs": 3},
    "kfac": {"engine": "laplace_kfac_ggn", "from": "map"},
    "kfac_last": {"engine": "laplace_kfac_fisher", "from": "map", "parameters": ["2.*"],
                  "prediction": "linearized"},
    "kfac_auto": {"engine": "laplace_kfac_ggn", "from": "map", "prior_variance": "auto"},
}


def dense_covariance(posterior: Posterior, dimension: int) -> torch.Tensor:
    """The covariance the Kronecker blocks stand for, formed densely (small models only)."""
    assert posterior.kronecker is not None
    covariance = torch.zeros(dimension, dimension, dtype=torch.float64)
    for block in posterior.kronecker.blocks:
        basis = torch.kron(block.output_vectors, block.input_vectors).double()
        index = block.index.reshape(-1)
        covariance[index.unsqueeze(-1), index] = basis @ torch.diag(
            block.scale.double().reshape(-1) ** 2) @ basis.T
    return covariance


def test_kfac_workflow_shares_its_curvature_and_stores_the_blocks(tmp_path: Path) -> None:
    """Both temperatures read one curvature pass (variances scale with T), the last-layer
    fit covers only the last layer, and the stored posterior's draws and log density are
    those of its dense covariance."""
    spec = yaml.safe_load(TINY_SPEC)
    spec.update({
        "methods": METHODS, "plots": [], "report": {"enabled": False},
        "execution": {"cache_dir": str(tmp_path / "cache")},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    })
    result = bayesflow.run(bayesflow.load(spec))
    assert result.exit_code == 0, result.outcome.errors
    frame = bayesflow.results(result.run_id, tracking_uri=result.tracking_uri)
    arrays = bayesflow.posteriors(result.run_id, tracking_uri=result.tracking_uri)
    runs = {(row.method, float(row.temperature)): row.run_id for row in frame.itertuples()}
    cold, warm = (Posterior.from_arrays(dict(arrays[runs["kfac", t]])) for t in (0.1, 1.0))
    assert cold.var is not None and warm.var is not None
    torch.testing.assert_close(cold.var, 0.1 * warm.var, rtol=1e-5, atol=1e-12)
    last = Posterior.from_arrays(dict(arrays[runs["kfac_last", 1.0]]))
    assert last.var is not None and last.kronecker is not None
    names = list(arrays[runs["kfac_last", 1.0]]["param_names"])
    sizes = [int(torch.Size([int(n) for n in shape.split("x")]).numel())
             for shape in arrays[runs["kfac_last", 1.0]]["param_shapes"]]
    head = sum(size for name, size in zip(names, sizes) if name.startswith("2."))
    assert int((last.var > 0).sum()) == head == sum(b.index.numel() for b in last.kronecker.blocks)

    fitted = load_posterior(runs["kfac", 1.0], tracking_uri=result.tracking_uri)
    assert warm.mean is not None
    covariance = dense_covariance(warm, warm.mean.shape[0])
    torch.testing.assert_close(covariance.diagonal(), warm.var.double(), rtol=1e-4, atol=1e-9)
    draws = fitted.sample(4, seed=0)
    dense = torch.distributions.MultivariateNormal(warm.mean.double(), covariance_matrix=covariance)
    torch.testing.assert_close(fitted.log_prob(draws).double(), dense.log_prob(draws.double()),
                               rtol=1e-4, atol=1e-2)

    # Every KFAC fit logs its evidence, one number for both temperatures of the shared
    # mode; `prior_variance: auto` raises it and its posterior moves with the chosen prior
    # (exact values against laplace-torch: tests/engines/test_evidence_kfac.py).
    table = frame.set_index(["method", "temperature"])
    for method in ("kfac", "kfac_last", "kfac_auto"):
        evidence = table.loc[method, "log_evidence"]
        assert evidence.notna().all() and evidence.nunique() == 1, (method, evidence)
    auto = table.loc["kfac_auto"]
    assert (auto["log_evidence_spec_prior"] == table.loc["kfac", "log_evidence"]).all()
    assert (auto["log_evidence"] > auto["log_evidence_spec_prior"]).all()
    assert auto["prior_variance_chosen"].nunique() == 1
    chosen_cold, chosen_warm = (Posterior.from_arrays(dict(arrays[runs["kfac_auto", t]])) for t in (0.1, 1.0))
    assert chosen_cold.var is not None and chosen_warm.var is not None
    torch.testing.assert_close(chosen_cold.var, 0.1 * chosen_warm.var, rtol=1e-5, atol=1e-12)
    assert not torch.allclose(chosen_warm.var, warm.var, rtol=1e-2)
