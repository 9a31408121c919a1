"""Shared fixtures and tiny problems of the evaluate tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from bayesflow.engines.base import Problem
from tests.numerics import torch_threads


@pytest.fixture(autouse=True, scope="package")
def one_thread() -> Iterator[None]:
    """Run on one thread (``BAYESFLOW_TEST_THREADS`` overrides): these tiny tensors are
    several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads())
    yield
    torch.set_num_threads(threads)


def linear_problem(inputs_dim: int, outputs_dim: int, likelihood: str = "categorical") -> Problem:
    """outputs = inputs @ params.reshape(inputs_dim, outputs_dim); no prior."""
    dimension = inputs_dim * outputs_dim
    return Problem(
        forward=lambda params, inputs: inputs @ params.reshape(inputs_dim, outputs_dim),
        log_likelihood=lambda outputs, targets: torch.zeros(outputs.shape[0]),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], outputs_dim, outputs_dim),
        log_prior=lambda params: torch.zeros(()),
        prior_precision=torch.zeros(dimension),
        num_data=4,
        dimension=dimension,
        param_names=("weight",),
        param_shapes=((inputs_dim, outputs_dim),),
        init_params=lambda generator: torch.zeros(dimension),
        likelihood=likelihood,
    )
