"""What a method's traits claim, checked against its engine, for every registered method.

The planner, the spec checks and the report read traits and never run an engine to find
out (docs/design.md, "Methods describe themselves"), so a trait that lies breaks a
workflow far from the method. Each test here turns one trait into a property of the
built engine, parametrized over the registry: a new method gets all of them with its
module and its row of ``SMALL_CONFIGS``.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import pytest
import torch

from bayesflow.engines.base import Batch, Problem
from bayesflow.engines.fit import fit
from bayesflow.engines.sgmcmc import chain_starts
from bayesflow.errors import StageError
from bayesflow.methods import METHODS
from bayesflow.temperature import CONVENTIONS, ChainTempering, Tempering
from tests.engines.helpers import (
    SMALL_CONFIGS,
    build_engine,
    conformance_problem,
    make_config,
    run_small,
    starting_point,
    tensors,
)

NAMES = METHODS.names()


def names_where(predicate: Any) -> list[str]:
    """The registered methods whose traits satisfy ``predicate``."""
    return [method.name for method in METHODS if predicate(method.traits)]


def test_every_method_has_one_row_in_the_conformance_table() -> None:
    """The registry and ``SMALL_CONFIGS`` name the same methods."""
    missing = sorted(set(NAMES) - set(SMALL_CONFIGS))
    unknown = sorted(set(SMALL_CONFIGS) - set(NAMES))
    assert not missing, f"add a SMALL_CONFIGS row (tests/engines/helpers.py) for {missing}"
    assert not unknown, f"SMALL_CONFIGS rows name no registered method: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_method_is_built_by_its_own_module(name: str) -> None:
    """A method's ``build`` is a function of the module that declares it (one module per
    family: spec class, traits and engine together)."""
    method = METHODS.get(name)
    assert callable(method.build), f"{name}: build is {method.build!r}, not a function"
    assert inspect.getmodule(method.build).__name__ == method.module  # type: ignore[union-attr]


def test_method_modules_do_not_import_torch() -> None:
    """Discovering every method (as the spec layer does) loads neither torch nor torchopt."""
    code = (
        "import sys, bayesflow.methods.registry as registry\n"
        "methods = list(registry.METHODS)\n"
        "assert methods, 'no methods found'\n"
        "heavy = sorted({'torch', 'torchopt', 'pyro'} & set(sys.modules))\n"
        "assert not heavy, f'importing the methods loaded {heavy}'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", NAMES)
def test_posterior_has_the_form_of_the_trait(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """``samples``: a sample set; ``gaussian``: a mean with a non-zero var or cov;
    ``point``: a mean with zero variance."""
    form = METHODS.get(name).traits.posterior
    fields = tensors(run_small(name, problem, data, mode, seed=0))
    if form == "samples":
        assert fields.keys() == {"samples"}
    elif form == "gaussian":
        assert fields.keys() in ({"mean", "var"}, {"mean", "cov"})
        spread = fields["var"] if "var" in fields else fields["cov"].diagonal()
        assert bool((spread > 0).all())
    else:
        assert fields.keys() == {"mean", "var"} and not fields["var"].any()


@pytest.mark.parametrize("name", NAMES)
def test_positive_temperature_is_refusing_zero(name: str, problem: Problem) -> None:
    """A method refuses to build at T = 0 exactly when its traits say it needs T > 0."""
    if METHODS.get(name).traits.positive_temperature:
        with pytest.raises(StageError, match="T = 0"):
            build_engine(name, problem, 0.0)
    else:
        build_engine(name, problem, 0.0)


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("name", NAMES)
def test_shared_across_temperatures_is_the_same_fit(
    name: str, convention: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """Under a convention where the traits say one fit serves every temperature, the fits
    at two temperatures are identical (same seed); where they say not, they differ."""
    shared = METHODS.get(name).traits.shared_across_temperatures(convention)
    # T = 3 rather than a cold one: under the likelihood convention the prior weight is T,
    # and the Hessian Laplace at the suite's mode (fitted at T = 1) stays positive definite
    # only with at least the prior it was fitted under.
    fits = [
        tensors(run_small(name, problem, data, mode, 0, temperature, convention))
        for temperature in (1.0, 3.0)
    ]
    same = fits[0].keys() == fits[1].keys() and all(
        torch.equal(fits[0][key], fits[1][key]) for key in fits[0]
    )
    assert same == shared


@pytest.mark.parametrize("name", names_where(lambda traits: "temperatures" in traits.vectorizes))
def test_vectorized_temperatures_run_as_one_grid(
    name: str, problem: Problem, data: Batch
) -> None:
    """A method that vectorises temperatures runs a grid as the fit-group stage does: one
    chain group per cell under a ChainTempering, with a loss per chain; with every chain
    at one temperature it takes the scalar engine's steps."""
    config = make_config(name)
    per_cell, temperatures = config.chains, (0.1, 1.0)
    starts = torch.cat([
        chain_starts(problem, problem.init_params(generator), per_cell, generator)
        for generator in (torch.Generator().manual_seed(seed) for seed in (0, 1))
    ])
    grid = ChainTempering(tuple(t for t in temperatures for _ in range(per_cell)), problem.num_data)
    engine = build_engine(name, problem, grid)
    state = engine.init(starts, torch.Generator().manual_seed(0))
    _, aux = engine.update(state, data)
    assert aux["chain_loss"].shape == (len(starts),)
    samples = fit(engine, starts, *data, torch.Generator().manual_seed(0)).posterior.samples
    assert samples is not None and samples.shape[0] % len(starts) == 0
    assert bool(torch.isfinite(samples).all())

    start = problem.init_params(torch.Generator().manual_seed(0))
    posteriors = [
        fit(build_engine(name, problem, tempering), start, *data, torch.Generator().manual_seed(1))
        .posterior.samples
        for tempering in (
            Tempering(0.3, problem.num_data),
            ChainTempering((0.3,) * per_cell, problem.num_data),
        )
    ]
    torch.testing.assert_close(posteriors[1], posteriors[0])


@pytest.mark.parametrize("name", names_where(lambda traits: traits.curvature is not None))
def test_shared_curvature_rescales_to_every_temperature(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """A method with a shared curvature pass: its state fitted at T = 1 gives, through the
    engine built at another T, that temperature's own fit (no second data pass)."""
    generator = torch.Generator().manual_seed(0)
    state = fit(build_engine(name, problem, 1.0), mode, *data, generator).state
    assert hasattr(state, "params") and hasattr(state, "curvature")
    for temperature in (0.0, 0.3):
        rescaled = tensors(build_engine(name, problem, temperature).posterior(state))
        own = tensors(run_small(name, problem, data, mode, seed=0, temperature=temperature))
        assert rescaled.keys() == own.keys()
        for key in own:
            torch.testing.assert_close(rescaled[key], own[key])


@pytest.mark.parametrize("name", NAMES)
def test_uses_prior_is_whether_the_prior_matters(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """Changing the prior's variance changes the fit exactly when the method uses the prior."""
    tight = conformance_problem(prior_variance=0.25)
    first = tensors(run_small(name, problem, data, mode, seed=0))
    second = tensors(run_small(name, tight, data, mode, seed=0))
    same = first.keys() == second.keys() and all(
        torch.equal(first[key], second[key]) for key in first
    )
    assert same != METHODS.get(name).traits.uses_prior


@pytest.mark.parametrize("name", names_where(lambda traits: traits.provides_mode))
def test_a_mode_provider_gives_a_mean_to_start_from(
    name: str, problem: Problem, data: Batch, mode: torch.Tensor
) -> None:
    """A method that provides a mode has a posterior mean, where `from:` methods start."""
    posterior = run_small(name, problem, data, mode, seed=0)
    assert posterior.mean is not None and posterior.mean.shape == (problem.dimension,)


def test_methods_needing_a_mode_have_one_to_start_from() -> None:
    """When some method needs a mode (the suite starts it from the MAP), another provides one."""
    if names_where(lambda traits: traits.needs_mode):
        assert names_where(lambda traits: traits.provides_mode)


@pytest.mark.parametrize(
    "name", names_where(lambda traits: "kinetic_temperature" in traits.diagnostics)
)
def test_kinetic_temperature_reads_the_momenta(
    name: str, problem: Problem, mode: torch.Tensor
) -> None:
    """A method whose kinetic temperature is tracked keeps momenta shaped like its chains."""
    engine = build_engine(name, problem)
    generator = torch.Generator().manual_seed(0)
    state = engine.init(starting_point(name, problem, mode, generator), generator)
    assert state.momenta.shape == state.params.shape
