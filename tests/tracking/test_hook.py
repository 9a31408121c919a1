"""The tracking hook: MLflow as a sink, written after each stage's artefact exists, one
child run per fit stage name, none duplicated by a rerun."""

from __future__ import annotations

from pathlib import Path

import pytest

import bayesflow
from bayesflow.tracking import InMemoryTracker
from tests.conftest import TINY_SPEC, write

TWINS = TINY_SPEC.replace(
    "evaluate:",
    "  twin:\n    engine: sghmc\n    lr: 0.01\n    epochs: 3\n    chains: 2\n    keep: last\n"
    "report: {enabled: false}\nplots: []\nevaluate:",
)


def fit_runs(tracker: InMemoryTracker, experiment: str = "tiny") -> list:
    """The fit runs of the experiment, oldest first."""
    return tracker.search_runs(experiment, tags={"bayesflow.role": "fit"})


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[InMemoryTracker, list]:
    """The tiny workflow with a `twin` of `sghmc` (equal settings), run twice."""
    folder = tmp_path_factory.mktemp("twins")
    tracker = InMemoryTracker(folder / "artifacts")
    loaded = bayesflow.load(write(folder, TWINS), [f"execution.cache_dir={folder / 'cache'}"])
    prepared = bayesflow.prepare(loaded)
    return tracker, [bayesflow.run(prepared, tracker=tracker) for _ in range(2)]


def test_every_fit_is_a_child_run_with_its_artefacts(twice) -> None:
    """Params, fit and evaluation metrics, the loss history, both npz artifacts, the
    evaluation's key; one run per fit stage."""
    tracker, (first, second) = twice
    runs = {record.tags["bayesflow.stage"]: record for record in fit_runs(tracker)}
    assert set(runs) == set(first.fit_runs) and len(runs) == 7
    record = runs["fit/sghmc/T=0.1/seed=0"]
    assert record.parent_id == second.run_id and record.status == "FINISHED"
    assert {"method": "sghmc", "engine": "sghmc", "temperature": "0.1", "seed": "0"}.items() <= record.params.items()
    assert {"fit_seconds", "steps", "train_loss", "test_nll", "test_accuracy"} <= set(record.metrics)
    assert len(tracker.get_history(record.run_id, "train_loss")) == 3
    assert record.tags["bayesflow.evaluation_key"] == first.plan.stages["evaluate/sghmc/T=0.1/seed=0"].key
    artifacts = tracker.artifact_root / record.run_id / "artifacts"
    assert (artifacts / "posterior" / "posterior.npz").exists() and (artifacts / "evaluation" / "evaluation.npz").exists()


def test_equal_methods_share_the_computation_but_not_the_run(twice) -> None:
    """`twin` reuses `sghmc`'s outputs (computed once) and still gets its own runs and rows."""
    tracker, (first, _) = twice
    status = first.outcome.status
    assert status["fit/sghmc/T=1/seed=0"] == "ran" and status["fit/twin/T=1/seed=0"] == "cached"
    assert first.plan.stages["fit/sghmc/T=1/seed=0"].key == first.plan.stages["fit/twin/T=1/seed=0"].key
    twin, sghmc = first.fit_runs["fit/twin/T=1/seed=0"], first.fit_runs["fit/sghmc/T=1/seed=0"]
    assert twin != sghmc and tracker.get_run(twin).params["method"] == "twin"
    assert "test_nll" in tracker.get_run(twin).metrics
    frame = bayesflow.results(first.run_id, tracker=tracker)
    assert sorted(frame["method"]) == ["laplace", "laplace", "map", "sghmc", "sghmc", "twin", "twin"]
    table = first.results()
    assert (table.loc[table["method"] == "twin", "status"] == "FINISHED").all()


def test_rerun_reuses_every_run_and_logs_nothing_again(twice) -> None:
    """The second run creates no fit run, moves every one under its parent, and does not
    log an evaluation again."""
    tracker, (first, second) = twice
    assert second.fit_runs == first.fit_runs
    assert all(record.parent_id == second.run_id for record in fit_runs(tracker))
    assert len(fit_runs(tracker)) == 7
    for run_id in second.fit_runs.values():
        assert len(tracker.get_history(run_id, "test_nll")) == 1


def test_a_failed_fit_is_a_failed_run_with_its_error(tmp_path: Path) -> None:
    """A diverging fit gets a FAILED run carrying the error; its evaluation none."""
    text = TINY_SPEC.replace("    lr: 0.01\n    epochs: 3\n    chains: 2", "    lr: 1.0e+6\n    epochs: 3\n    chains: 2")
    loaded = bayesflow.load(write(tmp_path, text), [
        f"execution.cache_dir={tmp_path / 'cache'}", "temperatures=[1.0]", "report.enabled=false", "plots=[]",
    ])
    tracker = InMemoryTracker(tmp_path / "artifacts")
    result = bayesflow.run(loaded, tracker=tracker)
    (failed,) = [r for r in fit_runs(tracker) if r.status == "FAILED"]
    assert failed.tags["bayesflow.stage"] == "fit/sghmc/T=1/seed=0" and "diverged" in failed.tags["bayesflow.error"]
    assert (tracker.artifact_root / failed.run_id / "artifacts" / "error.txt").exists()
    assert tracker.get_run(result.run_id).status == "FAILED"
