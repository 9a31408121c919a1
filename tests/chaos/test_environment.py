"""Hostile surroundings a run cannot choose: a store or cache it cannot write, a store
another process keeps locked, a terminal that cannot show the characters bayesflow
prints, a working folder whose name holds URI characters.

Each is a located, actionable error before any stage computes, or no error at all; never
a traceback, SQL or an "internal error"; nothing is lost and nothing is written outside
the run's folder. (A full disk under the cache or the store: tests/chaos/test_full_disk.py.)
The read-only cases need root (a bind mount) and are skipped elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bayesflow.tracking import preflight
from tests.chaos.helpers import (
    CACHE,
    SPEC,
    empty_store,
    entries,
    finished_once,
    fit_runs,
    invoke,
    leftovers,
    workflow,
)
from tests.chaos.mounts import read_only

NOISE = ("Traceback", "internal error", "[SQL:", "sqlalche.me")
pytestmark = pytest.mark.slow  # each test runs the tiny workflow once or twice (10-40 s)

STORE_SPEC = SPEC.replace("report:", "tracking:\n  uri: sqlite:///store/mlflow.db\nreport:")


def quiet(output: str) -> bool:
    """Whether ``output`` holds none of a traceback, SQL or an internal error."""
    return not any(noise in output for noise in NOISE)


def store_workflow(folder: Path) -> Path:
    """The tiny workflow with its MLflow store in ``folder/store``; the store's file."""
    workflow(folder, spec=STORE_SPEC, store=False)
    (folder / "store").mkdir()
    database = folder / "store" / "mlflow.db"
    database.write_bytes(empty_store().read_bytes())
    return database


def test_a_read_only_store_is_refused_before_any_stage(tmp_path: Path) -> None:
    """The store's folder on a read-only mount: exit 1 naming the file and the ways out,
    nothing computed; writable again, the same command finishes every cell."""
    database = store_workflow(tmp_path)
    with read_only(tmp_path / "store"):
        result = invoke(tmp_path, "run", "spec.yaml")
    assert result.exit_code == 1, result.output
    assert f"error: the tracking store {database} is on a read-only file system" in result.output
    assert "Remount it read-write" not in result.output  # that is the cache's wording
    assert "tracking.uri=sqlite:////<folder>/mlflow.db" in result.output and quiet(result.output)
    assert entries(tmp_path) == []

    again = invoke(tmp_path, "run", "spec.yaml")
    assert again.exit_code == 0, again.output
    assert finished_once(fit_runs(tmp_path, database), 2)


def test_a_read_only_cache_is_refused_before_any_stage(tmp_path: Path) -> None:
    """The cache on a read-only mount: exit 1 naming the lock file and the override that
    moves the cache; with that override the run finishes."""
    workflow(tmp_path)
    (tmp_path / CACHE).mkdir(parents=True)
    with read_only(tmp_path / ".bayesflow"):
        result = invoke(tmp_path, "run", "spec.yaml")
    assert result.exit_code == 1, result.output
    assert f"cannot create the lock file {CACHE / '.lock'} (Read-only file system)" in result.output
    assert "`bayesflow run SPEC execution.cache_dir=<folder>`" in result.output and quiet(result.output)
    assert fit_runs(tmp_path) == {}  # not even the parent run was started

    again = invoke(tmp_path, "run", "spec.yaml", "execution.cache_dir=elsewhere")
    assert again.exit_code == 0, again.output
    assert len(list((tmp_path / "elsewhere").glob("*/outputs.json"))) == 4


def test_a_store_that_is_not_a_database_is_named_before_any_stage(tmp_path: Path) -> None:
    """Bytes that are not SQLite where the store should be: exit 1 saying how to move the
    file aside; nothing computed, nothing overwritten."""
    database = store_workflow(tmp_path)
    database.write_bytes(b"\x00\xffnot a database" * 100)
    result = invoke(tmp_path, "run", "spec.yaml")
    assert result.exit_code == 1, result.output
    assert f"error: the tracking store {database} is not a usable SQLite database" in result.output
    assert f"`mv {database} {database}.broken`" in result.output and quiet(result.output)
    assert entries(tmp_path) == [] and database.read_bytes().startswith(b"\x00\xffnot a database")


HOLDER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()  # until the test closes it
"""


def test_a_locked_store_is_named_before_any_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds an exclusive transaction on the store: after waiting, exit 1
    naming the file and how to find the holder; nothing computed; a rerun once it lets go
    finishes every cell."""
    database = store_workflow(tmp_path)
    monkeypatch.setattr(preflight, "STORE_BUSY_SECONDS", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(database)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = invoke(tmp_path, "run", "spec.yaml")
    finally:
        holder.communicate("", timeout=60)
    assert result.exit_code == 1, result.output
    assert f"error: the tracking store {database} is locked (database is locked)" in result.output
    assert f"`fuser -v {database}`" in result.output and quiet(result.output)
    assert entries(tmp_path) == []

    again = invoke(tmp_path, "run", "spec.yaml")
    assert again.exit_code == 0, again.output
    assert finished_once(fit_runs(tmp_path, database), 2)


def test_output_the_terminal_cannot_encode_is_escaped_not_fatal(tmp_path: Path) -> None:
    """LC_ALL=C and PYTHONIOENCODING=ascii, a folder and an experiment named with θ, → and
    ±: the run exits 0 and prints them escaped (it used to end in an internal error after
    every stage had finished)."""
    folder = tmp_path / "θ→0 ±"
    folder.mkdir()
    workflow(folder, spec=SPEC.replace("report:", 'tracking:\n  experiment: "T→0 ±θ"\nreport:'))
    environment = {
        **os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C", "COLUMNS": "200",
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    done = subprocess.run([sys.executable, "-m", "bayesflow.cli", "run", "spec.yaml"], cwd=folder,
                          capture_output=True, env=environment, timeout=600, check=False)
    stdout, stderr = done.stdout.decode("ascii"), done.stderr.decode("ascii")  # ASCII only
    assert done.returncode == 0, stdout + stderr
    assert "stages: 4 ran, 0 cached, 0 failed" in stdout
    assert "(experiment 'T\\u21920 \\xb1\\u03b8'" in stdout and quiet(stdout + stderr)


def test_a_folder_named_with_uri_characters_holds_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A working folder named ``a%20b?c#d e θ``: the run finishes, its store, artifacts and
    cache are inside it, and its parent folder holds nothing new (the store's URI once
    became ``a b`` and ``a%20b`` beside it, and ``mlartifacts`` in the parent)."""
    from sqlalchemy.engine import make_url

    from bayesflow.tracking.mlflow_tracker import MlflowTracker

    folder = tmp_path / "a%20b?c#d e θ"
    folder.mkdir()
    workflow(folder, store=False)
    before = sorted(os.listdir(tmp_path))
    result = invoke(folder, "run", "spec.yaml")
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output and len(entries(folder)) == 4 and leftovers(folder) == []
    assert sorted(os.listdir(tmp_path)) == before

    tracker = MlflowTracker("sqlite:///mlflow.db", base=folder)
    assert make_url(tracker.uri).database == str(folder / "mlflow.db")  # SQLAlchemy reads it back
    runs = fit_runs(folder)
    assert finished_once(runs, 2)
    posteriors = sorted((folder / "mlartifacts").rglob("posterior/posterior.npz"))
    assert len(posteriors) == 2
    for record in tracker.search_runs("table", tags={"bayesflow.role": "fit"}):
        assert tracker.download_artifact(record.run_id, "posterior/posterior.npz", tmp_path / "out").is_file()
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "out"])

    from bayesflow.cli.store import _served_uri

    monkeypatch.chdir(folder)  # `bayesflow ui` hands MLflow's server a path it cannot misread
    assert _served_uri(None) == "sqlite:///mlflow.db"


def test_a_read_only_reports_folder_loses_no_work(tmp_path: Path) -> None:
    """``reports/`` on a read-only mount: the finished run says where its report is and
    how to get it copied (exit 1, no internal error after the work); writable again, the
    same command computes nothing and copies it."""
    workflow(tmp_path, spec=SPEC.replace("enabled: false", "enabled: true"))
    (tmp_path / "reports").mkdir()
    with read_only(tmp_path / "reports"):
        result = invoke(tmp_path, "run", "spec.yaml")
        found = re.search(r"logged to MLflow run (\w+);", result.output)
        assert found, result.output
        rendered = invoke(tmp_path, "report", found[1])  # `bayesflow report` says the same
    assert result.exit_code == 1, result.output
    assert f"error: cannot write the report into reports/table/{found[1]}" in result.output
    assert "(Read-only file system); every stage finished and is logged to MLflow run" in result.output
    assert "Remount it read-write" in result.output and "report.output_dir=<folder>" in result.output
    assert quiet(result.output) and len(entries(tmp_path)) == 5
    assert rendered.exit_code == 1, rendered.output
    assert f"cannot write the report into reports/table/{found[1]} (Read-only" in rendered.output
    assert f"run {found[1]} is unchanged in the store" in rendered.output and quiet(rendered.output)

    again = invoke(tmp_path, "run", "spec.yaml")
    assert again.exit_code == 0, again.output
    assert "stages: 0 ran, 5 cached, 0 failed" in again.output
    assert len(list((tmp_path / "reports" / "table").glob("*/report.html"))) == 1
