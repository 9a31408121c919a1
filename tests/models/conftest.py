"""Shared fixtures of the model, prior and subset tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.numerics import torch_threads


@pytest.fixture(autouse=True, scope="package")
def one_thread() -> Iterator[None]:
    """Run on one thread (``BAYESFLOW_TEST_THREADS`` overrides): these tiny tensors are
    several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads())
    yield
    torch.set_num_threads(threads)
