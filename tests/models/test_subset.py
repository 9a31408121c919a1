"""Inference over a subset of the parameters: restriction, embedding and the fit stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import vmap

from bayesflow.engines.base import Posterior, Problem
from bayesflow.engines.fit import fit
from bayesflow.errors import SpecError
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.methods.laplace import LaplaceSpec
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.subset import restrict_problem
from bayesflow.temperature import Tempering

NUM_DATA = 30
LAST_LAYER = 5 * 3 + 3  # 2.weight (3, 5) and 2.bias (3,) of an MLP 2 → 5 → 3


@pytest.fixture(scope="module")
def problem() -> Problem:
    """A tiny three-class MLP, 2 → 5 → 3."""
    model = mlp(2, 3, hidden=[5], activation="tanh")
    return build_problem(model, categorical(), diag_normal({"*.bias": 1.0, "*": 0.5}), NUM_DATA)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, 2) and labels (N,)."""
    generator = torch.Generator().manual_seed(0)
    return torch.randn(NUM_DATA, 2, generator=generator), torch.randint(
        0, 3, (NUM_DATA,), generator=generator
    )


@pytest.fixture(scope="module")
def full_params(problem: Problem) -> torch.Tensor:
    """Values of every parameter, fixed where not inferred."""
    return problem.init_params(torch.Generator().manual_seed(1))


def test_restricted_problem_describes_the_subset(
    problem: Problem, full_params: torch.Tensor
) -> None:
    """The subproblem has the selected tensors' names, shapes, size and prior precision."""
    subproblem, embed = restrict_problem(problem, full_params, ["2.*"])
    assert subproblem.param_names == ("2.weight", "2.bias")
    assert subproblem.param_shapes == ((3, 5), (3,))
    assert subproblem.dimension == LAST_LAYER
    torch.testing.assert_close(subproblem.prior_precision, problem.prior_precision[-LAST_LAYER:])
    torch.testing.assert_close(embed.restrict(full_params), full_params[-LAST_LAYER:])


def test_log_posterior_equals_the_full_one_at_the_embedded_point(
    problem: Problem, full_params: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Restricted and full log posteriors agree wherever the subset is filled in."""
    subproblem, embed = restrict_problem(problem, full_params, ["0.bias", "2.weight"])
    sub_params = torch.randn(subproblem.dimension, generator=torch.Generator().manual_seed(2))
    embedded = embed.fill(sub_params)
    torch.testing.assert_close(
        subproblem.log_posterior(sub_params, data), problem.log_posterior(embedded, data)
    )
    # The fixed entries are the given values; the selected ones are the subset's.
    torch.testing.assert_close(embed.restrict(embedded), sub_params)
    untouched = torch.ones(problem.dimension, dtype=torch.bool)
    untouched[embed.index] = False
    torch.testing.assert_close(embedded[untouched], full_params[untouched])


def test_gradient_flows_to_the_subset_only(
    problem: Problem, full_params: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The restricted gradient is the full gradient's selected entries."""
    subproblem, embed = restrict_problem(problem, full_params, ["2.*"])
    sub_gradient = torch.func.grad(subproblem.log_posterior)(embed.restrict(full_params), data)
    full_gradient = torch.func.grad(problem.log_posterior)(full_params, data)
    torch.testing.assert_close(sub_gradient, full_gradient[embed.index])


def test_restricted_forward_batches_over_chains(
    problem: Problem, full_params: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """vmap over subset vectors equals a loop (samplers run chains this way)."""
    subproblem, _ = restrict_problem(problem, full_params, ["2.*"])
    chains = torch.randn(3, subproblem.dimension)
    batched = vmap(subproblem.forward, in_dims=(0, None))(chains, data[0])
    looped = torch.stack([subproblem.forward(chain, data[0]) for chain in chains])
    torch.testing.assert_close(batched, looped)


def test_unmatched_pattern_lists_the_parameter_names(
    problem: Problem, full_params: torch.Tensor
) -> None:
    """A pattern that selects nothing is an error naming every tensor."""
    with pytest.raises(SpecError) as caught:
        restrict_problem(problem, full_params, ["2.*", "fc.*"], "methods.last.parameters")
    assert caught.value.problems == [
        (
            "methods.last.parameters: pattern(s) ['fc.*'] match no parameter tensor of the model; "
            "its tensors are: 0.weight, 0.bias, 2.weight, 2.bias"
        )
    ]


def test_last_layer_laplace_has_no_variance_outside_the_last_layer(
    problem: Problem, full_params: torch.Tensor, data: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Last-layer Laplace: zero variance off the last layer, the full Laplace's variance on it."""
    config = LaplaceSpec.model_validate({"engine": "laplace_diag_ggn", "batch_size": 10})
    tempering = Tempering(0.5, NUM_DATA)
    generator = torch.Generator().manual_seed(0)
    subproblem, embed = restrict_problem(problem, full_params, ["2.*"])
    engine = METHODS.get("laplace_diag_ggn").builder()(subproblem, tempering, config)
    posterior = embed(fit(engine, embed.restrict(full_params), *data, generator).posterior)
    assert posterior.mean is not None and posterior.var is not None
    torch.testing.assert_close(posterior.mean, full_params)
    assert torch.all(posterior.var[:-LAST_LAYER] == 0)
    assert torch.all(posterior.var[-LAST_LAYER:] > 0)
    # A diagonal GGN's last-layer block does not depend on the other layers being inferred.
    engine = METHODS.get("laplace_diag_ggn").builder()(problem, tempering, config)
    full = fit(engine, full_params, *data, torch.Generator().manual_seed(0)).posterior
    assert full.var is not None
    torch.testing.assert_close(posterior.var[-LAST_LAYER:], full.var[-LAST_LAYER:])


def test_embedded_samples_repeat_the_fixed_values(
    problem: Problem, full_params: torch.Tensor
) -> None:
    """Sample sets gain the fixed values in every row."""
    subproblem, embed = restrict_problem(problem, full_params, ["0.bias"])
    samples = torch.randn(4, subproblem.dimension)
    full = embed(Posterior(samples=samples)).samples
    assert full is not None and full.shape == (4, problem.dimension)
    torch.testing.assert_close(full[:, embed.index], samples)
    rest = torch.ones(problem.dimension, dtype=torch.bool)
    rest[embed.index] = False
    torch.testing.assert_close(full[:, rest], full_params[rest].expand(4, -1))


def test_embedded_covariance_is_zero_off_the_subset(
    problem: Problem, full_params: torch.Tensor
) -> None:
    """A dense covariance is placed in the subset's rows and columns, zeros elsewhere."""
    subproblem, embed = restrict_problem(problem, full_params, ["2.bias"])
    cov = torch.eye(subproblem.dimension) * 0.1 + 0.01
    full = embed(Posterior(mean=torch.zeros(subproblem.dimension), cov=cov))
    assert full.cov is not None and full.cov.shape == (problem.dimension, problem.dimension)
    torch.testing.assert_close(full.cov[embed.index][:, embed.index], cov)
    assert float(full.cov.abs().sum()) == pytest.approx(float(cov.abs().sum()))


def test_fit_stage_saves_last_layer_laplace_in_full_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workflow's last-layer Laplace writes a full-space posterior.npz, spread only in `2.*`."""
    from bayesflow.dag.cache import Entry
    from bayesflow.dag.plan import plan_workflow
    from bayesflow.spec.load import load_spec
    from bayesflow.stages import POSTERIOR_FILE, StageRunner
    from bayesflow.variants import load_data
    from tests.conftest import TINY_SPEC, write

    monkeypatch.chdir(tmp_path)
    text = TINY_SPEC.replace("    from: map\n", "    from: map\n    parameters: ['2.*']\n")
    loaded = load_spec(write(tmp_path, text))
    dataset = load_data(loaded)
    runner = StageRunner(loaded, dataset)
    stages = plan_workflow(loaded.spec, dataset.digest).stages
    fits = {(s.method, s.temperature): s for s in stages.values() if s.kind == "fit"}
    entries = {}
    for stage in (fits[("map", None)], fits[("laplace", 1.0)]):
        folder = tmp_path / stage.key
        folder.mkdir()
        values = runner(stage, {name: entries[name] for name in stage.inputs}, folder)
        entries[stage.name] = Entry(stage.key, folder, values)
    saved = dict(np.load(entries[fits[("laplace", 1.0)].name].file(POSTERIOR_FILE)))
    mapped = dict(np.load(entries[fits[("map", None)].name].file(POSTERIOR_FILE)))
    assert tuple(saved["param_names"]) == ("0.weight", "0.bias", "2.weight", "2.bias")
    last = 8 * 10 + 10  # mlp 64 → 8 → 10: 2.weight (10, 8), 2.bias (10,)
    np.testing.assert_array_equal(saved["mean"], mapped["mean"])
    assert np.all(saved["var"][:-last] == 0) and np.all(saved["var"][-last:] > 0)
