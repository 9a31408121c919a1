"""Fixtures shared by the engine tests: one thread, and the regression problem."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.engines.helpers import Regression, make_regression


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> Iterator[None]:
    """Run on one thread: these tiny tensors are several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def regression() -> Regression:
    """A float64 linear regression problem, its inputs (N, 3) and targets (N,)."""
    return make_regression()
