"""Superchains: chains that share a starting point (``chains_per_start``), and the nested
R-hat their fit logs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.func import vmap

from bayesflow.engines.fit import fit
from bayesflow.engines.sgmcmc import chain_starts
from bayesflow.errors import SpecError
from bayesflow.evaluate.convergence import nested_rhat
from bayesflow.evaluate.sampler import sampler_diagnostics
from bayesflow.methods import METHODS
from bayesflow.spec import load_spec
from bayesflow.temperature import Tempering
from tests.conftest import TINY_SPEC, write
from tests.engines.helpers import Regression


def test_chains_per_start_repeats_fewer_draws(regression: Regression) -> None:
    """K = 6 chains in superchains of 3: the two starts of a 2-chain draw, each for 3
    consecutive chains; the generator is left where the 2-chain draw leaves it."""
    problem, _, _ = regression
    start = problem.init_params(torch.Generator().manual_seed(1))
    grouped, plain = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    starts = chain_starts(problem, start, 6, grouped, per_start=3)
    expected = chain_starts(problem, start, 2, plain)
    assert torch.equal(starts, expected.repeat_interleave(3, dim=0))
    assert not torch.equal(starts[0], starts[3])
    assert torch.equal(torch.rand(3, generator=grouped), torch.rand(3, generator=plain))


def test_a_superchain_fit_logs_nested_rhat_of_its_last_states(regression: Regression) -> None:
    """Parallel SGHMC (keep: last) at T = 1 with 8 chains in 4 superchains: the diagnostics
    hold nested R-hat of the log posterior at the 8 final states grouped as 4 × 2 (and no
    split R-hat: one draw per chain), and nested_rhat_max is the largest nested R-hat."""
    problem, inputs, targets = regression
    tempering = Tempering(1.0, problem.num_data)
    spec = METHODS.get("sghmc").spec.model_validate({
        "engine": "sghmc", "lr": 0.05, "epochs": 3, "batch_size": 50, "chains": 8,
        "chains_per_start": 2, "keep": "last",
    })
    engine = METHODS.get("sghmc").builder()(problem, tempering, spec)
    result = fit(engine, problem.init_params(torch.Generator().manual_seed(0)), inputs, targets,
                 torch.Generator().manual_seed(2))
    diagnostics = sampler_diagnostics(problem, tempering, result.state, result.posterior, 8,
                                      inputs, targets, chains_per_start=2)
    samples = result.posterior.samples
    assert samples is not None and samples.shape[0] == 8

    def log_posterior(params: torch.Tensor) -> torch.Tensor:
        return problem.log_posterior(params, (inputs, targets), tempering.prior_weight)

    with torch.no_grad():
        values = vmap(log_posterior)(samples).reshape(8, 1).numpy()
    assert diagnostics["nested_rhat/log_posterior"] == pytest.approx(nested_rhat(values, 2), rel=1e-9)
    nested = [value for key, value in diagnostics.items() if key.startswith("nested_rhat/")]
    assert len(nested) == 4 and diagnostics["nested_rhat_max"] == max(nested)
    assert not any(key.startswith("rhat/") for key in diagnostics)
    plain = sampler_diagnostics(problem, tempering, result.state, result.posterior, 8, inputs, targets)
    assert not any(key.startswith("nested_rhat") for key in plain)


def test_chains_not_a_multiple_of_chains_per_start_is_a_located_spec_error(tmp_path: Path) -> None:
    """3 chains in superchains of 2: the error names the line, the key and the fix."""
    path = write(tmp_path, TINY_SPEC.replace("    chains: 2\n", "    chains: 3\n    chains_per_start: 2\n"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems == [
        (f"{path}:24:3: methods.sghmc: chains (3) must be a multiple of chains_per_start (2); "
         "change one of them")
    ]


def test_a_vectorised_grid_groups_each_cells_chains_and_logs_nested_rhat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``execution.vectorize``: the group stage starts each cell's 4 chains at 2 points
    (chain_starts with per_start 2, the starts repeated in pairs), and each cell's record
    holds nested R-hat over its 2 superchains of 2 chains."""
    import bayesflow
    from bayesflow.engines import sgmcmc
    from bayesflow.stages import compute
    from bayesflow.stages.context import WorkflowContext

    drawn: list[torch.Tensor] = []

    def recorded(*args: object, **kwargs: object) -> torch.Tensor:
        starts = chain_starts(*args, **kwargs)  # type: ignore[arg-type]
        drawn.append(starts)
        return starts

    monkeypatch.setattr(sgmcmc, "chain_starts", recorded)

    spec = TINY_SPEC.replace("    chains: 2\n", "    chains: 4\n    chains_per_start: 2\n")
    prepared = bayesflow.prepare(bayesflow.load(write(tmp_path, spec), ["execution.vectorize=true"]))
    context = WorkflowContext(prepared.loaded, prepared.dataset)
    stage = prepared.plan.stages["fit_group/sghmc"]
    staging = tmp_path / "staging"
    staging.mkdir()
    group = compute(context, stage, {}, staging)
    assert len(group.fits) == 2 and len(drawn) == 2
    for starts in drawn:
        assert torch.equal(starts[0], starts[1]) and torch.equal(starts[2], starts[3])
        assert not torch.equal(starts[0], starts[2])
    for record in group.fits:
        assert record["diagnostics"]["nested_rhat_max"] >= 1.0
        assert "nested_rhat/log_posterior" in record["diagnostics"]
