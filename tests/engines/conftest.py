"""Fixtures shared by the engine tests: one thread, the regression and the conformance problem."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from bayesflow.engines.base import Problem
from bayesflow.engines.fit import fit
from tests.engines.helpers import (
    CONFORMANCE_DATA,
    Regression,
    build_engine,
    conformance_problem,
    make_regression,
)
from tests.numerics import torch_threads


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> Iterator[None]:
    """Run on one thread (``BAYESFLOW_TEST_THREADS`` overrides): these tiny tensors are
    several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads())
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def regression() -> Regression:
    """A float64 linear regression problem, its inputs (N, 3) and targets (N,)."""
    return make_regression()


@pytest.fixture(scope="session")
def problem() -> Problem:
    """The conformance problem: a tiny three-class MLP."""
    return conformance_problem()


@pytest.fixture(scope="session")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The conformance data: inputs (N, 2) and class labels (N,)."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(CONFORMANCE_DATA, 2, generator=generator)
    targets = torch.randint(0, 3, (CONFORMANCE_DATA,), generator=generator)
    return inputs, targets


@pytest.fixture(scope="session")
def mode(problem: Problem, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The MAP of the conformance problem, where methods that need a mode start (as
    `from: map` does)."""
    engine = build_engine("map", problem, epochs=300, batch_size=None, optimizer={"lr": 0.05})
    generator = torch.Generator().manual_seed(0)
    posterior = fit(engine, problem.init_params(generator), *data, generator).posterior
    assert posterior.mean is not None
    return posterior.mean
