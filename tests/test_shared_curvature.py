"""A Laplace grid shares one curvature pass per seed and equals a direct Laplace fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import bayesflow
import bayesflow.variants
from bayesflow.dag.cache import Cache
from bayesflow.engines.base import Posterior
from bayesflow.engines.fit import fit
from bayesflow.methods import METHODS
from bayesflow.stages import POSTERIOR_FILE
from bayesflow.tracking import InMemoryTracker
from tests.conftest import TINY_SPEC, write


def test_rescaled_laplace_equals_a_direct_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each temperature's variance is T / (G + prior precision) from one shared pass."""
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path, TINY_SPEC.replace("evaluate:", "report: {enabled: false}\nevaluate:"))
    loaded = bayesflow.load(spec, ["plots=[]"])
    result = bayesflow.run(loaded, tracker=InMemoryTracker())
    assert result.exit_code == 0, result.outcome.errors
    assert result.outcome.status["curvature/laplace/seed=0"] == "ran"
    plan = bayesflow.plan(loaded)
    cache = Cache(loaded.spec.execution.cache_dir)

    def posterior(name: str) -> Posterior:
        entry = cache.get(plan.stages[name].key)
        return Posterior.from_arrays(dict(np.load(entry.file(POSTERIOR_FILE))))

    cold, warm = posterior("fit/laplace/T=0.1/seed=0"), posterior("fit/laplace/T=1/seed=0")
    mode = posterior("fit/map/T=shared/seed=0").mean
    torch.testing.assert_close(cold.var, 0.1 * warm.var, rtol=1e-5, atol=0)
    torch.testing.assert_close(cold.mean, mode)

    from bayesflow.stages import StageRunner

    runner = StageRunner(loaded, bayesflow.variants.load_data(loaded))
    problem, _, tempering = runner.context.problem(plan.stages["fit/laplace/T=1/seed=0"])
    engine = METHODS.get("laplace_diag_ggn").builder()(problem, tempering, loaded.spec.methods["laplace"])
    data = runner.dataset
    direct = fit(engine, mode, torch.as_tensor(data.x_train), torch.as_tensor(data.y_train),
                 torch.Generator().manual_seed(0)).posterior
    torch.testing.assert_close(warm.var, direct.var, rtol=1e-4, atol=1e-7)
