"""A new SQLite store is a copy of an empty one kept per MLflow version
(``tracking/sqlite_seed.py``): the same schema and rows as the store MLflow migrates, no
migration after the first, and MLflow's own creation when seeding is off or fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bayesflow.tracking import MlflowTracker
from bayesflow.tracking.sqlite_seed import seed_folder, seed_store


def _contents(database: Path) -> dict[str, object]:
    """Every table's rows (creation times left out) and the schema."""
    with sqlite3.connect(database) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out: dict[str, object] = {name: connection.execute(f"SELECT * FROM {name}").fetchall() for name in names}
        out["experiments"] = connection.execute(
            "SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments"
        ).fetchall()
        # MLflow's own migrations write a table's constraints in varying order: compare
        # each statement's lines as a set.
        out["schema"] = {
            (kind, name, frozenset(line.strip().rstrip(",") for line in (sql or "").splitlines()))
            for kind, name, sql in connection.execute("SELECT type, name, sql FROM sqlite_master")
        }
    connection.close()
    return out


def _open(uri: str) -> MlflowTracker:
    tracker = MlflowTracker(uri)
    run_id = tracker.start_run("seeded", "one", params={"a": 1}, metrics={"m": 2.0})
    tracker.end_run(run_id)
    assert [record.metrics["m"] for record in tracker.search_runs("seeded")] == [2.0]
    return tracker


@pytest.mark.slow
def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first store makes the seed; the second is copied from it without a migration;
    both hold what a store MLflow creates itself holds."""
    import mlflow.store.db.utils as db_utils

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    _open("sqlite:///first.db")
    assert list(seed_folder().glob("mlflow-*-empty.db")), "no seed was kept"

    def no_migration(engine: object) -> None:
        raise AssertionError("a seeded store was migrated")

    with monkeypatch.context() as patch:
        patch.setattr(db_utils, "_initialize_tables", no_migration)
        _open("sqlite:///seeded.db")
    monkeypatch.setenv("BAYESFLOW_STORE_SEED", "0")
    _open("sqlite:///plain.db")
    seeded, plain = _contents(tmp_path / "seeded.db"), _contents(tmp_path / "plain.db")
    for table in ("runs", "params", "metrics", "latest_metrics", "tags"):  # ids and times differ
        seeded.pop(table), plain.pop(table)
    assert seeded == plain


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
def test_no_seed_where_the_store_exists_or_seeding_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing file is never replaced; an unwritable cache leaves creation to MLflow."""
    existing = tmp_path / "mlflow.db"
    existing.write_bytes(b"x")
    assert not seed_store(existing) and existing.read_bytes() == b"x"
    assert not seed_store(tmp_path / "missing" / "mlflow.db")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder cannot be made
    assert not seed_store(tmp_path / "new.db")
    monkeypatch.chdir(tmp_path)
    _open("sqlite:///new.db")
