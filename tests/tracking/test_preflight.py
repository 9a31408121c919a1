"""What a store fault is called: the error SQLite raised, however MLflow and SQLAlchemy
wrap it, names the store and the fix; other errors are not blamed on the store.
(Real read-only, full and locked stores: tests/chaos.)"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from bayesflow.errors import TrackingError
from bayesflow.tracking.preflight import check_store, is_store_fault, store_fault


def wrapped(inner: BaseException) -> Exception:
    """``inner`` wrapped twice, as MLflow wraps SQLAlchemy's wrapping of sqlite3's."""
    try:
        try:
            raise inner
        except BaseException as error:
            raise RuntimeError("(sqlite3.OperationalError) ...\n[SQL: INSERT ...]") from error
    except RuntimeError as outer:
        try:
            raise ValueError("MLflow: the session failed") from outer
        except ValueError as top:
            return top


@pytest.mark.parametrize(("inner", "words"), [
    (sqlite3.OperationalError("database is locked"), "database is locked): another process has held"),
    (sqlite3.OperationalError("database or disk is full"), "no space left on the disk that holds"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "is on a read-only file system"),
    (sqlite3.DatabaseError("file is not a database"), "is not a usable SQLite database"),
])
def test_a_wrapped_sqlite_fault_is_named_with_the_store(inner: BaseException, words: str, tmp_path: Path) -> None:
    """The innermost error says the kind; the message names the file, not the SQL."""
    database = tmp_path / "mlflow.db"
    error = wrapped(inner)
    assert is_store_fault(error, database)
    message = str(store_fault(error, database, "starting run 'x'"))
    assert words in message and str(database.parent) in message and "[SQL:" not in message


def test_errors_that_are_not_the_stores_are_not_blamed_on_it(tmp_path: Path) -> None:
    """A full disk where a download goes, or an unknown run, is no store fault."""
    database = tmp_path / "store" / "mlflow.db"
    elsewhere = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "downloads" / "x.npz"))
    assert not is_store_fault(elsewhere, database)
    inside = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(database.parent / "mlartifacts" / "x.npz"))
    assert is_store_fault(inside, database)
    assert not is_store_fault(ValueError("Run 'abc' not found"), database)


def test_check_store_makes_the_folder_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A store that does not exist yet passes, its folder made as MLflow would; the probe
    file is gone; a non-SQLite URI is not looked at."""
    database = tmp_path / "new" / "mlflow.db"
    check_store(f"sqlite:///{database}")
    assert (tmp_path / "new").is_dir() and list((tmp_path / "new").iterdir()) == []
    check_store("file:///nowhere/at/all")


def test_check_store_names_a_folder_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file")
    with pytest.raises(TrackingError, match=r"cannot use the tracking store .*blocker/mlflow.db"):
        check_store(f"sqlite:///{tmp_path / 'blocker' / 'mlflow.db'}")
