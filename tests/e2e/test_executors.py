"""Worker processes and Ray give the same results as one-by-one, and lose no metric."""

from __future__ import annotations

from pathlib import Path

import pytest

import bayesflow
from tests.conftest import TINY_SPEC, write

pytestmark = pytest.mark.e2e
METRICS = ["test_nll", "test_accuracy", "test_ece", "test_brier", "fit_seconds", "steps"]


def run_in(folder: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str):
    """Run the tiny workflow (no report) in ``folder``; return its results frame."""
    monkeypatch.chdir(folder)
    spec = write(folder, TINY_SPEC.replace("evaluate:", "report: {enabled: false}\nevaluate:"))
    result = bayesflow.run(bayesflow.load(spec, list(overrides)))
    assert result.exit_code == 0, result.outcome.errors
    return bayesflow.results(result.run_id, tracking_uri=result.tracking_uri)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> object:
    """The reference: stages one by one."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_in(tmp_path_factory.mktemp("sequential"), monkeypatch)


def test_worker_processes_log_every_metric(sequential, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes: every fit run has every metric, equal to the sequential run."""
    frame = run_in(tmp_path, monkeypatch, "execution.workers=2")
    assert len(frame) == len(sequential) == 5
    assert frame[METRICS].notna().all().all()
    columns = ["method", "temperature", "seed", "test_nll", "test_accuracy"]
    left = frame[columns].sort_values(columns[:3]).reset_index(drop=True)
    right = sequential[columns].sort_values(columns[:3]).reset_index(drop=True)
    assert left.equals(right)


def test_ray_local_instance_matches_sequential(sequential, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """executor: ray on a local Ray instance gives the same results."""
    pytest.importorskip("ray", reason="Ray is the optional extra bayesflow-workflows[ray]")
    frame = run_in(tmp_path, monkeypatch, "execution.executor=ray", "execution.workers=2")
    columns = ["method", "temperature", "seed", "test_nll"]
    left = frame[columns].sort_values(columns[:3]).reset_index(drop=True)
    right = sequential[columns].sort_values(columns[:3]).reset_index(drop=True)
    assert left.equals(right)


def test_equal_methods_are_fitted_once_by_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two methods with equal settings under two names: two workers fit and evaluate once."""
    monkeypatch.chdir(tmp_path)
    twin = "  map_again:\n    engine: map\n    optimizer: {name: adam, lr: 0.01}\n    epochs: 3\n"
    text = TINY_SPEC.replace("  laplace:\n", twin + "  laplace:\n")
    spec = write(tmp_path, text.replace("evaluate:", "report: {enabled: false}\nevaluate:"))
    result = bayesflow.run(bayesflow.load(spec, ["execution.workers=2"]))
    outcome = result.outcome
    assert result.exit_code == 0, outcome.errors
    for kind in ("fit", "evaluate"):
        pair = [f"{kind}/{method}/T=shared/seed=0" for method in ("map", "map_again")]
        assert sorted(outcome.status[name] for name in pair) == ["cached", "ran"]
        assert outcome.entries[pair[0]] == outcome.entries[pair[1]]
