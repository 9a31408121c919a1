"""The wheel holds what an installed bayesflow needs to run a workflow."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# The double well, shrunk by overrides to a few seconds of fitting (its report is drawn).
DOUBLE_WELL_SMALL = [
    "evaluate.ksd.max_samples=100", "methods.deep_ensemble.epochs=50",
    "methods.serial_sghmc.epochs=300", "methods.parallel_sghmc.epochs=50",
]


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
    """Every workflow YAML of the checkout's top-level workflows/ is in the wheel, under
    bayesflow/workflows/."""
    names = set(wheel.namelist())
    expected = {f"bayesflow/workflows/{p.name}" for p in (ROOT / "workflows").glob("*.yaml")}
    assert expected and expected <= names


@pytest.mark.slow
def test_the_wheel_holds_the_report_templates_data_and_methods(wheel: zipfile.ZipFile) -> None:
    """Templates, shipped data, py.typed and every method module travel with the package."""
    names = set(wheel.namelist())
    templates = {f"bayesflow/templates/{p.name}" for p in (ROOT / "templates").glob("*.py")}
    methods = {f"bayesflow/methods/{p.name}" for p in (ROOT / "bayesflow" / "methods").glob("*.py")}
    files = ROOT / "bayesflow" / "data" / "files"
    data = {f"bayesflow/data/files/{p.relative_to(files).as_posix()}" for p in files.rglob("*") if p.is_file()}
    assert "bayesflow/data/files/lm/checkpoint/model.safetensors" in data  # the folders' files too
    assert templates and templates <= names
    assert methods <= names and data <= names
    assert "bayesflow/py.typed" in names
    assert not any(name.startswith(("tests/", "benchmarks/", "workflows/", "templates/"))
                   for name in names)


def test_the_checkout_keeps_one_copy_of_workflows_and_templates() -> None:
    """The design card's layout: the specs and notebooks live in top-level folders only."""
    assert sorted((ROOT / "workflows").glob("*.yaml")) and sorted((ROOT / "templates").glob("*.py"))
    assert not list((ROOT / "bayesflow").glob("workflows/*.yaml"))
    assert not list((ROOT / "bayesflow").glob("templates/*.py"))


@pytest.mark.slow
def test_the_installed_wheel_runs_a_workflow_by_name_from_an_empty_folder(
    wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    """The wheel installed on its own (no checkout on the path) validates, plans and runs a
    bundled workflow by name from an empty folder, and renders its report from the shipped
    template."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
         "--target", str(site), wheel.filename],
        check=True, capture_output=True, text=True, timeout=300,
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}

    def bayesflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bayesflow.cli", *args], cwd=empty,
                              env=environment, capture_output=True, text=True, timeout=600,
                              check=False)

    where = subprocess.run([sys.executable, "-c", "import bayesflow; print(bayesflow.__file__)"],
                           cwd=empty, env=environment, capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(site))  # the wheel's copy, not the checkout
    listed = bayesflow("workflows")
    assert listed.returncode == 0 and "cold_posterior" in listed.stdout, listed.stderr
    ran = bayesflow("run", "double_well", *DOUBLE_WELL_SMALL)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (html,) = empty.glob("reports/double_well/*/report.html")
    assert "data:image/png;base64" in html.read_text()
    # Only what a run writes (the store, its artifacts and creation lock, the cache, reports).
    assert sorted(path.name for path in empty.iterdir()) == [
        ".bayesflow", "mlartifacts", "mlflow.db", "mlflow.db.lock", "reports"]
