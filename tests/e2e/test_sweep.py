"""End to end: a 2 × 2 sweep through the real command line and a real MLflow SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bayesflow
from tests.e2e.test_cli import bayesflow as command
from tests.e2e.test_cli import client

pytestmark = pytest.mark.e2e

SPEC = """\
name: swept
data: {name: sklearn_digits, test_fraction: 0.5}
model: {name: mlp, hidden: [8]}
likelihood: {name: categorical}
prior: {name: diag_normal, variance: 1.0}
temperatures: [0.1, 1.0]
seeds: [0]
methods:
  map: {engine: map, optimizer: {name: adam, lr: 0.01}, epochs: 2}
  sghmc: {engine: sghmc, lr: 0.01, epochs: 2, chains: 2, keep: last}
evaluate: {n_samples: 4}
plots: [nll_vs_temperature]
"""
SWEEP = ["-m", "prior.variance=0.5,1", "methods.sghmc.lr=0.01,0.02"]


def _counts(stdout: str) -> dict[str, int]:
    """``stages: 12 ran, 4 cached, ...`` as numbers."""
    line = next(line for line in stdout.splitlines() if line.startswith("stages:"))
    words = line.removeprefix("stages:").split(" in ")[0].split(",")
    return {word.split()[1]: int(word.split()[0]) for word in words}


def test_a_two_by_two_sweep_is_one_parent_with_every_cell(tmp_path: Path) -> None:
    """4 variants × (map + sghmc at 2 temperatures) = 12 child runs under one parent; MAP
    depends on the prior only, so it is fitted twice, not four times; the results carry the
    variant; a rerun computes nothing."""
    (tmp_path / "spec.yaml").write_text(SPEC.replace("plots:", "report: {enabled: false}\nplots:"))
    first = command(tmp_path, "run", "spec.yaml", *SWEEP)
    assert first.returncode == 0, first.stdout + first.stderr
    counts = _counts(first.stdout)
    # fits: 2 MAP + 8 SGHMC computed, 2 MAP reused; evaluations the same; 1 plot
    assert counts == {"ran": 2 + 8 + 2 + 8 + 1, "cached": 2 + 2, "failed": 0, "skipped": 0}
    mlflow = client(tmp_path)
    experiment = mlflow.get_experiment_by_name("swept").experiment_id
    runs = mlflow.search_runs([experiment])
    parents = [run for run in runs if run.data.tags.get("bayesflow.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    children = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 12
    labels = {run.data.tags["bayesflow.variant"] for run in children}
    assert labels == {f"prior.variance={v} methods.sghmc.lr={lr}" for v in ("0.5", "1") for lr in ("0.01", "0.02")}
    for run in children:
        swept = json.loads(run.data.tags["bayesflow.swept"])
        assert float(run.data.params["prior.variance"]) == float(swept["prior.variance"])
        assert float(run.data.params["methods.sghmc.lr"]) == float(swept["methods.sghmc.lr"])
    frame = bayesflow.results(parent.info.run_id, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(frame) == 12 and frame["variant"].nunique() == 4
    assert set(frame["swept/prior.variance"]) == {"0.5", "1"}
    assert "variant" in first.stdout  # the summary table groups by variant

    again = command(tmp_path, "run", "spec.yaml", *SWEEP)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _counts(again.stdout)["ran"] == 0


def test_a_sweep_with_its_report(tmp_path: Path) -> None:
    """With the report on, one report covers both variants and its results name them;
    `bayesflow plan -m` lists each variant's stages."""
    (tmp_path / "spec.yaml").write_text(SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [1.0]"))
    plan = command(tmp_path, "plan", "spec.yaml", "-m", "prior.variance=0.5,1")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "fit/sghmc/T=1/seed=0/prior.variance=0.5" in plan.stdout and "report" in plan.stdout
    result = command(tmp_path, "run", "spec.yaml", "-m", "prior.variance=0.5,1")
    assert result.returncode == 0, result.stdout + result.stderr
    reports = list((tmp_path / "reports").rglob("report.html"))
    assert len(reports) == 1
    bundles = list((tmp_path / ".bayesflow" / "cache").rglob("results.json"))
    assert bundles, "the report stage wrote no bundle"
    text = bundles[0].read_text()
    assert "variant" in text and "prior.variance=0.5" in text


def test_a_sweep_error_exits_3_naming_the_variant(tmp_path: Path) -> None:
    """A bad value in one variant is a spec error (exit 3) naming the variant and key; a
    comma sweep without -m says to add it."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    bad = command(tmp_path, "run", "spec.yaml", "-m", "prior.variance=0.5,-1")
    assert bad.returncode == 3
    assert "variant 2 of 2 (prior.variance=-1)" in bad.stderr and "prior.variance" in bad.stderr
    plain = command(tmp_path, "validate", "spec.yaml", "prior.variance=0.5,1")
    assert plain.returncode == 3 and "add -m" in plain.stderr
