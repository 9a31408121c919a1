"""Shared fixtures: a tiny valid spec, written as YAML into a temporary folder."""

from __future__ import annotations

import os
import tempfile
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


# What a CPU of each kernel level gives torch's other libraries: matrix products run in MKL
# and some layers in oneDNN, each dispatching on the CPU by itself (on this machine MKL's
# SSE4.2, AVX2 and AVX-512 paths give three different roundings of one float64 product).
# The bundled language-model workflows run SmolLM2-135M by default, which a machine pulls
# once (`bayesflow models pull smollm2-135m`, tests/llm/test_pull.py); the other tests run
# them on the byte-level checkpoint shipped inside the package, with its own window sizes.
BYTE_CHECKPOINT: dict[str, dict[str, object]] = {
    "bayesian_llm_ood": {
        "model.path": "package:lm/checkpoint", "data.tokenizer": "model",
        "model.trainable.parameters": ["model.layers.3.*"],
        "data.length": 64, "data.stride": 64, "data.scored": 32,
    },
    "bayesian_lora": {"model.path": "package:lm/checkpoint"},
    "continual_lora": {
        "model.path": "package:lm/checkpoint", "data.tokenizer": "bytes",
        "data.length": 128, "data.stride": 128, "data.scored": 64,
    },
}


def byte_checkpoint_overrides(name: str) -> list[str]:
    """``key=value`` overrides that put the bundled workflow ``name`` on the shipped
    byte-level checkpoint (none for a workflow without a language model)."""
    import json

    return [f"{key}={json.dumps(value) if isinstance(value, list) else value}"
            for key, value in BYTE_CHECKPOINT.get(name, {}).items()]


def on_byte_checkpoint(spec: dict[str, object]) -> dict[str, object]:
    """The parsed bundled workflow ``spec`` on the shipped byte-level checkpoint (in place)."""
    for key, value in BYTE_CHECKPOINT.get(str(spec.get("name")), {}).items():
        node = spec
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]  # type: ignore[assignment]
        node[leaf] = value
    return spec


def run_at_one_temperature(spec: dict[str, object], folder: Path):  # type: ignore[no-untyped-def]
    """``spec`` run at T = 1 with no plots nor report, its cache and sqlite store in
    ``folder``: (the loaded spec, the run's result), the run checked to have succeeded."""
    import bayesflow

    spec.update({
        "temperatures": [1.0], "plots": [], "report": {"enabled": False},
        "execution": {"cache_dir": str(folder / "cache")},
        "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}"},
    })
    loaded = bayesflow.load(spec)
    result = bayesflow.run(loaded)
    assert result.exit_code == 0, result.outcome.errors
    return loaded, result


LIBRARY_LEVELS = {
    "default": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
}


def pytest_configure(config: pytest.Config) -> None:
    """Set up the environment ``make test-kernels`` varies, for this process, the xdist
    workers and the command lines the tests start.

    ``BAYESFLOW_TEST_THREADS=n``: every torch uses n intra-op threads (torch reads
    ``OMP_NUM_THREADS`` when it starts). ``ATEN_CPU_CAPABILITY``: MKL and oneDNN, which
    pick their own kernels by CPU, are held to the same level (``LIBRARY_LEVELS``; a value
    set by hand wins), and torch.compile's code cache gets a folder of its own per level:
    inductor's cache does not key on the level (torch 2.13), so code compiled under one
    level and reused under another fails to build or computes wrong numbers.
    """
    threads = os.environ.get(THREADS_VARIABLE)
    if threads:
        torch_threads()  # a malformed value fails here, once, with what to set
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    for variable, value in LIBRARY_LEVELS.get(capability, {}).items():
        os.environ.setdefault(variable, value)
    if capability and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        user = os.environ.get("USER") or str(os.getuid())  # no passwd entry in some containers
        folder = Path(tempfile.gettempdir()) / f"torchinductor_{user}_{capability}"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)


@pytest.fixture(autouse=True)
def apply_test_threads() -> Iterator[None]:
    """Under ``BAYESFLOW_TEST_THREADS``, give torch that many threads before every test:
    torch may have been imported before ``OMP_NUM_THREADS`` was set, and a workflow run
    in this process applies ``execution.threads`` (1 by default) and keeps it. Nothing
    is changed when the variable is unset."""
    if os.environ.get(THREADS_VARIABLE):
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
    libraries = ", ".join(f"{name}={os.environ.get(name, 'unset')}" for name in LIBRARY_LEVELS["default"])
    return f"torch {torch.__version__}: CPU kernel {capability} ({libraries}), {torch.get_num_threads()} threads"
