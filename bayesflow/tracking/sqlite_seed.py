"""A new SQLite MLflow store from a saved empty one, instead of MLflow's migrations.

Opening a SQLite store that does not exist makes MLflow create its tables and then run
every Alembic migration since its first schema: 1-2.5 s on a 2-core machine, paid by the
first ``bayesflow run`` in every new folder. The result depends only on the MLflow
version, so :func:`seed_store` keeps one empty store per MLflow version in the user's
cache folder (``$XDG_CACHE_HOME/bayesflow``, else ``~/.cache/bayesflow``; made by MLflow
itself the first time) and copies it to the new store's path; MLflow then opens it as an
existing store at the current schema and adds its default experiment, as it would have.
Set ``BAYESFLOW_STORE_SEED=0`` to let MLflow create every store itself.

Only :mod:`bayesflow.tracking.mlflow_tracker` calls it, inside its store lock, so mlflow
is imported lazily here too.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

__all__ = ["seed_folder", "seed_store"]


def seed_folder() -> Path:
    """Where the empty stores are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bayesflow"


def seed_store(database: Path) -> bool:
    """Copy the empty store of this MLflow version to ``database`` when it does not exist
    and its folder does; return whether it did. Any failure (no cache folder, a store
    MLflow cannot make) leaves the creation to MLflow."""
    if os.environ.get("BAYESFLOW_STORE_SEED", "1") == "0":
        return False
    if database.exists() or not database.parent.is_dir():
        return False
    try:
        seed = _seed()
        partial = database.with_name(f".{database.name}.{os.getpid()}.seed")
        shutil.copyfile(seed, partial)
        os.replace(partial, database)
    except (OSError, sqlite3.Error, ImportError):
        return False
    return True


def _seed() -> Path:
    """The empty store of this MLflow version, made on first use (written under a
    temporary name and renamed, so two processes making it at once both succeed)."""
    from importlib.metadata import version

    folder = seed_folder()
    seed = folder / f"mlflow-{version('mlflow')}-empty.db"
    if seed.is_file():
        return seed
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".seed-") as scratch:
        made = Path(scratch) / "mlflow.db"
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        from bayesflow.tracking.uri import sqlite_uri

        store = SqlAlchemyStore(sqlite_uri(made), Path(scratch, "artifacts").as_uri())
        store.engine.dispose()
        # The default experiment names this scratch folder: MLflow adds it again, with the
        # real store's artifact location, when it opens the copy.
        with sqlite3.connect(made) as connection:
            connection.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            connection.execute("DELETE FROM experiments WHERE experiment_id = 0")
        connection.close()
        os.replace(made, seed)
    return seed
