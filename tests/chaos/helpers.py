"""What the chaos tests share: a tiny workflow run in this process or as a command, and
a count of what a run left behind (cache entries, MLflow runs per fit)."""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from bayesflow.cli import app
from tests.data.tables import TABLE_SPEC, good_rows, write_table

# Two seeds: two fits and two evaluations, so that a failure can leave some stages done.
SPEC = TABLE_SPEC.replace("seeds: [0]", "seeds: [0, 1]")
CACHE = Path(".bayesflow") / "cache"


@lru_cache(maxsize=1)
def empty_store() -> Path:
    """An MLflow SQLite store with its tables made, once per test process (making them
    takes seconds; copying the file does not)."""
    from bayesflow.tracking.mlflow_tracker import MlflowTracker

    path = Path(tempfile.mkdtemp(prefix="bayesflow-chaos-")) / "mlflow.db"
    assert MlflowTracker(f"sqlite:///{path}").client is not None
    return path


def workflow(folder: Path, spec: str = SPEC, store: bool = True) -> Path:
    """Write the tiny table workflow into ``folder`` (with an empty MLflow store unless
    ``store`` is False); return the spec's path."""
    if store:
        shutil.copyfile(empty_store(), folder / "mlflow.db")
    return write_table(folder, good_rows(), spec=spec)


def invoke(folder: Path, *args: str) -> Any:
    """Run the command line in this process from ``folder``; stdout and stderr together in
    ``.output``, the exit code in ``.exit_code``."""
    here = Path.cwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    finally:
        os.chdir(here)


def entries(folder: Path) -> list[Path]:
    """The finished entries of the cache of ``folder`` (folders with an outputs.json)."""
    return sorted(path.parent for path in (folder / CACHE).glob("*/outputs.json"))


def leftovers(folder: Path) -> list[str]:
    """Staging and trash folders, and entry folders without outputs (half-written)."""
    root = folder / CACHE
    if not root.exists():
        return []
    found = []
    for path in root.iterdir():
        if path.name.startswith((".staging-", ".trash-")) or path.is_dir() and path.name != "index" and not (path / "outputs.json").is_file():
            found.append(path.name)
    return found


def fit_runs(folder: Path, database: Path | None = None) -> dict[str, list[str]]:
    """Stage name → statuses of the MLflow runs that computed a fit in ``folder``'s store
    (or the store ``database``; a rerun's reused children, tagged ``bayesflow.computed_by``,
    left out)."""
    from bayesflow.tracking.mlflow_tracker import MlflowTracker
    from bayesflow.tracking.uri import sqlite_uri

    client = MlflowTracker(sqlite_uri(database or folder / "mlflow.db")).client
    found: dict[str, list[str]] = {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            # A rerun's child pointing to the run that computed its fit is no second fit.
            if run.data.tags.get("bayesflow.role") == "fit" and "bayesflow.computed_by" not in run.data.tags:
                found.setdefault(run.data.tags["bayesflow.stage"], []).append(run.info.status)
    return found


def finished_once(runs: dict[str, list[str]], fits: int) -> bool:
    """Whether each of ``fits`` fit stages has exactly one FINISHED run and none is RUNNING."""
    return (
        len(runs) == fits
        and all(statuses.count("FINISHED") == 1 for statuses in runs.values())
        and not any("RUNNING" in statuses for statuses in runs.values())
    )
