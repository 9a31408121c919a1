"""The tracking hook: MLflow as a sink, written after each stage's artefact exists, one
child run per fit stage name, none duplicated by a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
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
    tracker, (first, _) = twice
    runs = {record.tags["bayesflow.stage"]: record for record in fit_runs(tracker) if record.parent_id == first.run_id}
    assert set(runs) == set(first.fit_runs) and len(runs) == 7
    record = runs["fit/sghmc/T=0.1/seed=0"]
    assert record.status == "FINISHED" and "bayesflow.computed_by" not in record.tags
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


def test_a_rerun_keeps_the_first_parents_children_and_points_to_them(twice) -> None:
    """The second run computes nothing, yet its parent gets one child per cell, tagged
    with the run that computed it, with the same params and metrics and no artifacts of
    its own; the first parent keeps its children."""
    tracker, (first, second) = twice
    assert set(second.outcome.status.values()) == {"cached"}
    assert set(second.fit_runs) == set(first.fit_runs)
    assert len([r for r in fit_runs(tracker) if r.parent_id in (first.run_id, second.run_id)]) == 14
    for stage, run_id in second.fit_runs.items():
        child, source = tracker.get_run(run_id), tracker.get_run(first.fit_runs[stage])
        assert child.parent_id == second.run_id and source.parent_id == first.run_id
        assert child.tags["bayesflow.computed_by"] == source.run_id and child.tags["bayesflow.reused"] == "true"
        assert child.tags["bayesflow.artifact_uri"] == source.artifact_uri
        assert child.params == source.params and child.metrics == source.metrics
        assert len(tracker.get_history(run_id, "train_loss")) == int("train_loss" in source.metrics)  # last value only
        assert len(tracker.get_history(run_id, "test_nll")) == 1
        assert not (tracker.artifact_root / run_id / "artifacts" / "posterior").exists()


def test_readers_give_the_same_tables_for_both_parents(twice) -> None:
    """results, histories and posteriors of the second parent equal the first's (run ids
    aside); the posteriors come from the runs that computed them."""
    tracker, (first, second) = twice
    ids = ["run_id", "run_name"]
    one, two = (bayesflow.results(run.run_id, tracker=tracker) for run in (first, second))
    pd.testing.assert_frame_equal(one.drop(columns=ids), two.drop(columns=ids))
    history = [bayesflow.histories(run.run_id, tracker=tracker).drop(columns="run_id") for run in (first, second)]
    pd.testing.assert_frame_equal(*history)
    posteriors = [bayesflow.posteriors(run.run_id, tracker=tracker) for run in (first, second)]
    by_stage = [{stage: found[run.fit_runs[stage]] for stage in run.fit_runs} for run, found in zip((first, second), posteriors)]
    assert by_stage[0].keys() == by_stage[1].keys() and len(by_stage[0]) == 7
    for stage, arrays in by_stage[0].items():
        for name, values in arrays.items():
            np.testing.assert_array_equal(values, by_stage[1][stage][name])


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


def test_a_sampler_run_has_summary_metrics_its_flags_and_one_diagnostics_table(twice) -> None:
    """An SG-MCMC fit run holds a few summary metrics (no per-tensor ones), one tag per
    flag with their count as the metric `flags` (the same flags as the results table),
    and every tensor's diagnostics in diagnostics/diagnostics.json."""
    tracker, (first, _) = twice
    table, stored = first.results(), bayesflow.results(first.run_id, tracker=tracker)
    assert any(column.startswith("flag/") for column in stored)  # 3 epochs: the chains are off target
    for stage in ("fit/sghmc/T=0.1/seed=0", "fit/sghmc/T=1/seed=0"):
        record = tracker.get_run(first.fit_runs[stage])
        assert len(record.metrics) <= 20 and not [key for key in record.metrics if "/" in key and not key.startswith("trace/")]
        assert {"kinetic_temperature_ratio", "configurational_temperature_ratio", "flags"} <= set(record.metrics)
        tags = {key.removeprefix("bayesflow.flag."): value for key, value in record.tags.items()
                if key.startswith("bayesflow.flag.")}
        assert record.metrics["flags"] == len(tags)
        (row,) = table[table["cell"] == stage].to_dict("records")
        assert {metric: row[f"flag/{metric}"] for metric in tags} == tags
        (read,) = stored[stored["run_id"] == record.run_id].to_dict("records")
        assert {metric: read[f"flag/{metric}"] for metric in tags} == tags
        assert all(row[column] == "" for column in table if column.startswith("flag/") and column[5:] not in tags)
        folder = tracker.artifact_root / record.run_id / "artifacts"
        logged = json.loads((folder / "diagnostics" / "diagnostics.json").read_text())
        names = [str(name) for name in np.load(folder / "posterior" / "posterior.npz")["param_names"]]
        rows = {row[0]: dict(zip(logged["columns"], row)) for row in logged["data"]}
        assert set(names) < set(rows) and "all" in rows
        for name in names:
            lower, value, upper = (rows[name][key] for key in (
                "kinetic_temperature_lower", "kinetic_temperature", "kinetic_temperature_upper"))
            assert 0 < lower < upper and value > 0 and 0 <= rows[name]["kinetic_temperature_inside"] <= 1
        assert rows["all"]["kinetic_temperature_ratio"] == pytest.approx(record.metrics["kinetic_temperature_ratio"])


def test_a_new_evaluation_of_a_reused_fit_is_logged_to_the_new_child(tmp_path: Path) -> None:
    """Changing only the evaluation reuses the fits; each new child then carries its own
    evaluation arrays (not the source's) and still reads the source's posterior."""
    text = TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [1.0]").replace(
        "evaluate:", "report: {enabled: false}\nplots: []\nevaluate:")
    spec = write(tmp_path, text)
    tracker = InMemoryTracker(tmp_path / "artifacts")
    cache = f"execution.cache_dir={tmp_path / 'cache'}"
    first = bayesflow.run(bayesflow.load(spec, [cache]), tracker=tracker)
    second = bayesflow.run(bayesflow.load(spec, [cache, "evaluate.n_samples=6"]), tracker=tracker)
    stage = "fit/laplace/T=1/seed=0"  # a Gaussian: 4 and 6 draws give other predictives
    assert second.outcome.status[stage] == "cached" and second.outcome.status[stage.replace("fit/", "evaluate/")] == "ran"
    child, source = second.fit_runs[stage], first.fit_runs[stage]
    assert tracker.get_run(child).tags["bayesflow.computed_by"] == source
    own = tracker.artifact_root / child / "artifacts"
    assert (own / "evaluation" / "evaluation.npz").exists() and not (own / "posterior").exists()
    arrays = [bayesflow.evaluations(run.run_id, tracker=tracker)[run.fit_runs[stage]] for run in (first, second)]
    assert not np.array_equal(arrays[0]["probabilities"], arrays[1]["probabilities"])
    posteriors = [bayesflow.posteriors(run.run_id, tracker=tracker)[run.fit_runs[stage]] for run in (first, second)]
    assert posteriors[0].keys() == posteriors[1].keys()
    for name in ("mean", "var"):
        np.testing.assert_array_equal(posteriors[0][name], posteriors[1][name])


def test_a_reused_fit_without_its_evaluation_still_gets_its_run(twice, tmp_path: Path) -> None:
    """A reused fit's run waits for its evaluation; when none comes (a failed or skipped
    evaluation), publish_stages creates it, pointing to the run that computed the fit."""
    from bayesflow.tracking.hook import TrackingHook

    tracker, (first, _) = twice
    parent = tracker.start_run("tiny", "third", tags={"bayesflow.role": "parent"})
    hook = TrackingHook(tracker, bayesflow.load(write(tmp_path, TWINS)), first.plan, parent, "tiny")
    stage = first.plan.stages["fit/sghmc/T=1/seed=0"]
    hook.after_stage(stage, first.outcome.entries[stage.name], cached=True)
    assert stage.name not in hook.runs  # waiting for the evaluation
    hook.publish_stages()
    record = tracker.get_run(hook.runs[stage.name])
    assert record.parent_id == parent and record.status == "FINISHED"
    assert record.tags["bayesflow.computed_by"] == first.fit_runs[stage.name]
    assert "test_nll" not in record.metrics and "fit_seconds" in record.metrics
