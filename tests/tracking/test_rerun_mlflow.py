"""A rerun on a real SQLite MLflow store: both parents keep a child per cell, the second's
children point to the first's, and the readers and load_posterior work on either."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bayesflow
from bayesflow.tracking import MlflowTracker
from tests.conftest import TINY_SPEC, write

SPEC = TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [1.0]").replace(
    "evaluate:", "report: {enabled: false}\nplots: []\nevaluate:"
)


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[MlflowTracker, list]:
    """The tiny workflow (map, laplace, sghmc at T = 1) run twice on one SQLite store."""
    folder = tmp_path_factory.mktemp("rerun")
    tracker = MlflowTracker(f"sqlite:///{folder / 'mlflow.db'}")
    loaded = bayesflow.load(write(folder, SPEC), [f"execution.cache_dir={folder / 'cache'}"])
    prepared = bayesflow.prepare(loaded)
    return tracker, [bayesflow.run(prepared, tracker=tracker) for _ in range(2)]


@pytest.mark.slow
def test_both_parents_hold_every_cell_and_the_second_points_to_the_first(twice) -> None:
    """Three cells, three children under each parent; the second run computed nothing and
    each of its children names the first run's child of the same stage."""
    tracker, (first, second) = twice
    assert set(second.outcome.status.values()) == {"cached"}
    children = [
        {record.tags["bayesflow.stage"]: record for record in tracker.search_runs("tiny", parent_id=run.run_id)}
        for run in (first, second)
    ]
    assert set(children[0]) == set(children[1]) == set(first.fit_runs) and len(first.fit_runs) == 3
    for stage, child in children[1].items():
        source = children[0][stage]
        assert child.tags["bayesflow.computed_by"] == source.run_id and "bayesflow.computed_by" not in source.tags
        assert child.metrics == source.metrics and child.params == source.params


@pytest.mark.slow
def test_readers_agree_for_both_parents_and_the_posterior_loads_through_the_pointer(twice) -> None:
    """results and histories are equal for both parents (run ids aside); load_posterior of
    a reused child samples the same posterior as the child that computed it."""
    tracker, (first, second) = twice
    ids = ["run_id", "run_name"]
    one, two = (bayesflow.results(run.run_id, tracker=tracker) for run in (first, second))
    pd.testing.assert_frame_equal(one.drop(columns=ids), two.drop(columns=ids))
    history = [bayesflow.histories(run.run_id, tracker=tracker).drop(columns="run_id") for run in (first, second)]
    assert len(history[0]) >= 3
    pd.testing.assert_frame_equal(*history)
    stage = "fit/sghmc/T=1/seed=0"
    loaded = [bayesflow.load_posterior(run.fit_runs[stage], tracking_uri=tracker.uri) for run in (first, second)]
    draws = [posterior.sample(4, seed=0).cpu().numpy() for posterior in loaded]
    np.testing.assert_array_equal(*draws)
