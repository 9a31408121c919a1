"""The wheel holds what an installed bayesflow needs to run a workflow."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel built from this checkout (no network: the venv's setuptools)."""
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(folder), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (built,) = folder.glob("bayesflow_workflows-*.whl")
    return zipfile.ZipFile(built)


@pytest.mark.slow
def test_the_wheel_holds_every_bundled_workflow(wheel: zipfile.ZipFile) -> None:
    """Every workflow YAML of the checkout is in the wheel, under bayesflow/workflows/."""
    names = set(wheel.namelist())
    expected = {f"bayesflow/workflows/{p.name}" for p in (ROOT / "bayesflow" / "workflows").glob("*.yaml")}
    assert expected and expected <= names


@pytest.mark.slow
def test_the_wheel_holds_the_report_templates_data_and_methods(wheel: zipfile.ZipFile) -> None:
    """Templates, shipped data, py.typed and every method module travel with the package."""
    names = set(wheel.namelist())
    templates = {f"bayesflow/templates/{p.name}" for p in (ROOT / "bayesflow" / "templates").glob("*.py")}
    methods = {f"bayesflow/methods/{p.name}" for p in (ROOT / "bayesflow" / "methods").glob("*.py")}
    data = {f"bayesflow/data/files/{p.name}" for p in (ROOT / "bayesflow" / "data" / "files").iterdir()}
    assert templates and templates <= names
    assert methods <= names and data <= names
    assert "bayesflow/py.typed" in names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
