"""The device logic a GPU exercises, checked on the CPU.

A draw from a CUDA generator must make its tensor on the generator's device: torch
refuses ``torch.randn(..., generator=cuda_generator)`` without ``device=`` (the
default workflow exited 1 on an H100 for that reason). Every such draw in the package
is found here by reading the source, so a new one without ``device=`` fails on the
CPU too; and the memory budget's CUDA path is driven with a stand-in for
``torch.cuda.mem_get_info``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import bayesflow
from bayesflow.engines.memory import (
    MEMORY_VARIABLE,
    SAFETY_FRACTION,
    available_bytes,
    memory_budget,
)

PACKAGE = Path(bayesflow.__file__).parent
# Functions that make a new tensor and take a generator: they need device= as well.
FACTORIES = {"rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like"}
# In-place draws follow their tensor's device; listed so that each use is looked at.
IN_PLACE = {"normal_", "uniform_", "bernoulli_", "exponential_", "random_", "multinomial", "bernoulli"}
# Draws from a generator made on the CPU in the same function or module, where the CPU is
# the intended device: (file, function).
CPU_GENERATORS = {("posterior/fitted.py", "sample")}


def draws() -> list[tuple[str, str, int, str, set[str]]]:
    """(file, enclosing function, line, called name, keyword names) of every call that
    passes ``generator=``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function in [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]:
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                keywords = {keyword.arg for keyword in node.keywords if keyword.arg}
                if "generator" not in keywords:
                    continue
                callee = node.func
                name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
                found.append((path.relative_to(PACKAGE).as_posix(), function.name, node.lineno, name, keywords))
    return found


@pytest.mark.slow
def test_the_source_has_draws_to_check() -> None:
    names = {name for _, _, _, name, _ in draws()}
    assert {"randn", "randperm", "randint"} <= names


@pytest.mark.slow
def test_every_new_tensor_drawn_from_a_generator_names_its_device() -> None:
    missing = [
        f"{file}:{line} {name}(...) in {function}"
        for file, function, line, name, keywords in draws()
        if name in FACTORIES and "device" not in keywords and (file, function) not in CPU_GENERATORS
    ]
    assert missing == [], "draws without device= (a CUDA generator would be refused): " + ", ".join(missing)


# In-place draws guarded by a check that their tensor is on the generator's device (else a
# fresh draw on the generator's device): (file, function, the guard's text).
GUARDED_IN_PLACE = {("engines/sgmcmc.py", "standard_normal"): "scratch.device == generator.device"}


@pytest.mark.slow
def test_no_in_place_draw_from_a_generator() -> None:
    """An in-place draw needs its tensor on the generator's device: none but the guarded ones."""
    found = [(file, function, line) for file, function, line, name, _ in draws() if name in IN_PLACE]
    assert [(file, line) for file, function, line in found if (file, function) not in GUARDED_IN_PLACE] == []
    for (file, function), guard in GUARDED_IN_PLACE.items():
        assert guard in (PACKAGE / file).read_text(), f"{file}:{function} lost its device guard"


def test_the_cpu_generators_are_still_made_on_the_cpu() -> None:
    """The exceptions above hold only while those generators are CPU ones."""
    text = (PACKAGE / "posterior" / "fitted.py").read_text()
    assert "generator = torch.Generator()\n" in text


def test_the_budget_on_a_cuda_device_is_a_share_of_its_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_VARIABLE, raising=False)
    asked = []

    def mem_get_info(device: torch.device) -> tuple[int, int]:
        asked.append(device)
        return 8 * 2**30, 80 * 2**30

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    cuda = torch.device("cuda", 1)
    assert available_bytes(cuda) == 8 * 2**30
    assert memory_budget(cuda) == int(SAFETY_FRACTION * 8 * 2**30)
    assert asked == [cuda, cuda]  # the device the pass runs on, not the current one
    monkeypatch.setenv(MEMORY_VARIABLE, "1GiB")
    assert memory_budget(cuda) == 2**30


def test_the_budget_on_the_cpu_reads_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_VARIABLE, raising=False)
    available = available_bytes(torch.device("cpu"))
    assert 0 < available
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        total = int(next(line for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:")).split()[1])
        assert available <= total * 1024
