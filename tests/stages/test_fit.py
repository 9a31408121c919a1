"""The fit, fit_group and prior predictive stages called directly: typed artefacts in,
a typed artefact out, files only in the staging folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bayesflow
from bayesflow.dag.cache import Cache
from bayesflow.stages import compute
from bayesflow.stages.artefacts import (
    FitArtefact,
    FitGroupArtefact,
    PriorPredictiveArtefact,
    read,
)
from bayesflow.stages.context import WorkflowContext
from tests.conftest import TINY_SPEC, write


@pytest.fixture(scope="module")
def vectorised(tmp_path_factory: pytest.TempPathFactory) -> tuple[WorkflowContext, object, Cache]:
    """The tiny workflow with a vectorised SGHMC grid and the prior predictive check."""
    folder = tmp_path_factory.mktemp("vectorised")
    loaded = bayesflow.load(write(folder, TINY_SPEC), [
        "execution.vectorize=true", "evaluate.prior_predictive=true", "evaluate.prior_draws=8",
    ])
    prepared = bayesflow.prepare(loaded)
    return WorkflowContext(prepared.loaded, prepared.dataset), prepared.plan, Cache(folder / "cache")


def commit(cache: Cache, stage: object, artefact: object, staging: Path) -> object:
    """Commit a computed artefact and read it back from its entry."""
    entry = cache.commit(stage.key, staging, artefact.values())  # type: ignore[attr-defined]
    return read(stage.kind, entry)  # type: ignore[attr-defined]


def test_a_vectorised_cell_takes_its_posterior_from_the_group(vectorised) -> None:
    """The group writes one posterior per cell; each cell's fit is that file and its record."""
    context, plan, cache = vectorised
    group_stage = plan.stages["fit_group/sghmc"]
    staging = cache.staging(group_stage.key)
    group = commit(cache, group_stage, compute(context, group_stage, {}, staging), staging)
    assert isinstance(group, FitGroupArtefact) and len(group.cells) == 2
    assert [path.name for path in group.posteriors] == ["posterior-0.npz", "posterior-1.npz"]
    cell_stage = plan.stages[group.cells[1]]
    staging = cache.staging(cell_stage.key)
    fit = compute(context, cell_stage, {group_stage.name: group}, staging)
    assert isinstance(fit, FitArtefact) and fit.vectorized and fit.steps == group.fits[1]["steps"]
    assert fit.posterior.parent == staging
    with np.load(fit.posterior) as mine, np.load(group.posteriors[1]) as theirs:
        np.testing.assert_array_equal(mine["samples"], theirs["samples"])


def test_prior_predictive_summarises_draws(vectorised) -> None:
    """The check writes its per-draw arrays and returns summary metrics."""
    context, plan, cache = vectorised
    stage = plan.stages["prior_predictive"]
    staging = cache.staging(stage.key)
    check = commit(cache, stage, compute(context, stage, {}, staging), staging)
    assert isinstance(check, PriorPredictiveArtefact) and check.metrics
    with np.load(check.file) as arrays:
        assert arrays["majority_fraction"].shape == (8,)
