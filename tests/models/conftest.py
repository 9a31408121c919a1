"""Shared fixtures of the model, prior and subset tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="package")
def one_thread() -> Iterator[None]:
    """Run on one thread: these tiny tensors are several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
