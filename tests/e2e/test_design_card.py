"""End to end: the design card's first command, typed word for word from the root of a clone.

``bayesflow run workflows/cold_posterior.yaml`` names the top-level ``workflows/`` folder of
the repository's layout (``bayesflow/ workflows/ templates/ reports/ tests/``). The clone is
the checkout's tracked files copied as they are now, so the test sees uncommitted edits;
the command line runs with the clone's root as its working folder and so imports the
clone's own package, finds the workflow by its path and the report template in the clone's
``templates/``, and writes its report under the clone's ``reports/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).parents[2]
# Every method of the workflow, at two temperatures and one seed, with a few epochs each.
SMALL = [
    "seeds=[0]", "temperatures=[0.01,1]", "evaluate.n_samples=5",
    "methods.map.epochs=3", "methods.vi.epochs=2", "methods.sghmc.epochs=4",
    "methods.sghmc.burn_in=10", "methods.sghmc.thin=2", "methods.parallel_sghmc.epochs=2",
    "methods.parallel_sghmc.chains=3",
]


def clone(destination: Path) -> Path:
    """The checkout's tracked files (as they are in the working tree) under ``destination``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no clone to make")
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a file deleted but not yet committed is skipped
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def test_the_design_card_command_runs_from_a_clone(tmp_path: Path) -> None:
    """`bayesflow run workflows/cold_posterior.yaml` from a clone's root exits 0, logs a parent
    run and writes the report under reports/cold_posterior/."""
    root = clone(tmp_path / "clone")
    assert (root / "workflows" / "cold_posterior.yaml").is_file()
    assert (root / "templates" / "cold_posterior.py").is_file()
    environment = {**os.environ, "COLUMNS": "200"}
    environment.pop("MLFLOW_TRACKING_URI", None)
    result = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", "run", "workflows/cold_posterior.yaml", *SMALL],
        cwd=root, env=environment, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (html,) = root.glob("reports/cold_posterior/*/report.html")
    assert "data:image/png;base64" in html.read_text()
    assert (root / "mlflow.db").is_file()
    # The clone's own package ran (its root is the working folder), not another copy.
    imported = subprocess.run(
        [sys.executable, "-c", "import bayesflow.shipped as s; print(s.shipped_folder('workflows'))"],
        cwd=root, env=environment, capture_output=True, text=True, check=True,
    )
    assert Path(imported.stdout.strip()) == root / "workflows"


def test_a_workflow_path_outside_a_clone_points_to_the_bundled_name(tmp_path: Path) -> None:
    """Typed where no workflows/ folder exists, the design card's path is answered with the
    command that runs the bundled workflow by name (exit 3)."""
    result = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", "validate", "workflows/cold_posterior.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 3
    assert ("did you mean the bundled workflow 'cold_posterior'? run: bayesflow run "
            "cold_posterior") in result.stdout + result.stderr
