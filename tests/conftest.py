"""Shared fixtures: a tiny valid spec, written as YAML into a temporary folder."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.numerics import THREADS_VARIABLE, torch_threads

TINY_SPEC = """\
name: tiny
description: a tiny workflow for tests
data:
  name: sklearn_digits
  test_fraction: 0.5
model:
  name: mlp
  hidden: [8]
likelihood:
  name: categorical
prior:
  name: diag_normal
  variance: 1.0
temperatures: [0.1, 1.0]
seeds: [0]
methods:
  map:
    engine: map
    optimizer: {name: adam, lr: 0.01}
    epochs: 3
  laplace:
    engine: laplace_diag_ggn
    from: map
  sghmc:
    engine: sghmc
    lr: 0.01
    epochs: 3
    chains: 2
    keep: last
evaluate:
  n_samples: 4
"""


def write(folder: Path, text: str, name: str = "spec.yaml") -> Path:
    """Write dedented YAML into ``folder/name`` and return the path."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    """A valid tiny spec file."""
    return write(tmp_path, TINY_SPEC)


def pytest_configure(config: pytest.Config) -> None:
    """Under ``BAYESFLOW_TEST_THREADS=n`` every torch in the run, this process's, the xdist
    workers' and the command lines' the tests start, uses n intra-op threads (torch reads
    ``OMP_NUM_THREADS`` when it starts); ``make test-kernels`` runs the suite under 1 and 2."""
    threads = os.environ.get(THREADS_VARIABLE)
    if threads:
        torch_threads()  # a malformed value fails here, once, with what to set
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads


@pytest.fixture(autouse=True, scope="session")
def apply_test_threads() -> Iterator[None]:
    """Apply ``BAYESFLOW_TEST_THREADS`` to torch in this process when it is set (torch may
    have been imported before ``OMP_NUM_THREADS`` was); left alone otherwise."""
    if not os.environ.get(THREADS_VARIABLE):
        yield
        return
    import torch

    torch.set_num_threads(torch_threads())
    yield


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the CPU kernel and thread count under ``make test-kernels`` (``ATEN_CPU_CAPABILITY``
    or ``BAYESFLOW_TEST_THREADS`` set), so a log says which combination it ran."""
    if not (os.environ.get("ATEN_CPU_CAPABILITY") or os.environ.get(THREADS_VARIABLE)):
        return None
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    return f"torch {torch.__version__}: CPU kernel {capability}, {torch.get_num_threads()} threads"
