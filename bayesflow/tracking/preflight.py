"""Is the tracking store writable? Asked once before a run computes anything, and the words
for what is wrong with a local store whenever a write to it fails.

A run writes to its store on a worker while the stages compute (tracking/background.py),
so a store it cannot write would otherwise be found after minutes of fitting, as a
SQLAlchemy error. :func:`check_store` finds, in milliseconds, a server that does not
answer (:func:`~bayesflow.tracking.uri.probe_server`) and, for a SQLite store, a folder
that cannot be made or written (read-only, full, not a folder), a database file that
cannot be written, or one locked by another process's write transaction.
:func:`store_fault` words an ``OSError`` or ``sqlite3`` error of a store: the path, what
is wrong, and what to do. Neither imports mlflow or SQLAlchemy.

A store that fails these checks ends ``bayesflow run`` with exit code 1 (a
:class:`~bayesflow.errors.TrackingError`), as a busy cache does: the command was called
rightly (2 is for that) and the spec is valid (3); the surroundings refused the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from pathlib import Path
from shlex import quote

from bayesflow.errors import TrackingError
from bayesflow.tracking.uri import probe_server, sqlite_database

__all__ = ["STORE_BUSY_SECONDS", "check_store", "is_store_fault", "store_fault"]

# How long a run waits for another process's write transaction on the store before it
# says the store is locked. MLflow's own writes last milliseconds; SQLite's default wait,
# which MLflow keeps, is 5 s per statement.
STORE_BUSY_SECONDS = 10.0
# Bytes written to prove the store's disk has room: one SQLite page (MLflow's default).
PROBE_BYTES = 4096
# The folder of an SQLite store's artifacts (mlflow_tracker.ARTIFACT_FOLDER, not imported:
# that module needs mlflow's names at import).
ARTIFACTS = "mlartifacts"

_FULL = (errno.ENOSPC, errno.EDQUOT)


def check_store(uri: str) -> None:
    """Fail fast, before any stage, when the run could not write to the store ``uri``.

    Raises:
        TrackingError: the server does not answer, or the SQLite store's folder, database
            file or artifact folder cannot be written, or its database stays locked for
            :data:`STORE_BUSY_SECONDS`; the message names the path and the fix.
    """
    probe_server(uri)
    database = sqlite_database(uri)
    if database is None:
        return
    try:
        database.parent.mkdir(parents=True, exist_ok=True)  # as MLflow would
        for folder in (database.parent, database.parent / ARTIFACTS):
            if folder.is_dir():
                _probe_folder(folder)
        if database.is_file():
            _probe_database(database)
    except (OSError, sqlite3.Error) as error:
        raise store_fault(error, database) from None


def _probe_folder(folder: Path) -> None:
    """Create, write and delete a small file in ``folder`` (raises what the disk says)."""
    handle, name = tempfile.mkstemp(dir=folder, prefix=".bayesflow-probe-")
    try:
        os.write(handle, b"\0" * PROBE_BYTES)
    finally:
        os.close(handle)
        os.unlink(name)


def _probe_database(database: Path) -> None:
    """Open ``database`` for writing and take and give back its write lock."""
    connection = sqlite3.connect(
        f"{database.as_uri()}?mode=rw", uri=True, timeout=STORE_BUSY_SECONDS, isolation_level=None
    )
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += (Path(folder) / name).lstat().st_size
    return total


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count / 1e3:.0f} kB"


# What SQLite says (its error name, or the words sqlite3 and SQLAlchemy show) for each
# kind of fault; an OSError's errno says it for the files beside the database.
_SQLITE = {
    "full": (("SQLITE_FULL",), "database or disk is full"),
    "read-only": (("SQLITE_READONLY",), "attempt to write a readonly database"),
    "denied": (("SQLITE_PERM",), "access permission denied"),
    "locked": (("SQLITE_BUSY", "SQLITE_LOCKED"), "database is locked"),
    "damaged": (("SQLITE_NOTADB", "SQLITE_CORRUPT"), "file is not a database"),
}
_ERRNO = {"full": _FULL, "read-only": (errno.EROFS,), "denied": (errno.EACCES, errno.EPERM)}


def _kind(error: BaseException, folder: Path | None) -> str:
    """``full``, ``read-only``, ``denied``, ``locked``, ``damaged`` or ``""``. An
    ``OSError`` naming a file outside the store's ``folder`` (a download's destination) is
    no fault of the store."""
    if isinstance(error, OSError) and not isinstance(error, sqlite3.Error):
        named = error.filename
        if named is not None and folder is not None \
                and not Path(os.path.abspath(str(named))).is_relative_to(os.path.abspath(folder)):
            return ""
        return next((kind for kind, numbers in _ERRNO.items() if error.errno in numbers), "")
    name = getattr(error, "sqlite_errorname", "") or ""
    text = str(error).lower()
    for kind, (names, words) in _SQLITE.items():
        if name.startswith(names) or words in text or kind == "damaged" and "disk image is malformed" in text:
            return kind
    return ""


def _diagnose(error: BaseException, folder: Path | None = None) -> tuple[str, BaseException]:
    """The kind of fault (see :func:`_kind`) and the innermost error in ``error``'s chain
    that shows it (MLflow and SQLAlchemy wrap sqlite3's); ``("", error)`` when none does."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for cause in reversed(chain):
        kind = _kind(cause, folder)
        if kind:
            return kind, cause
    return "", error


def is_store_fault(error: BaseException, database: Path) -> bool:
    """Whether ``error`` shows that the SQLite store ``database`` (or the artifacts beside
    it) is full, read-only, not writable by this user, locked or damaged (and not, say,
    that a run id does not exist, or that a download's destination is full)."""
    return bool(_diagnose(error, database.parent)[0])


def _reason(error: BaseException) -> str:
    """The error's own first line, without SQLAlchemy's SQL and links."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error).splitlines()[0] if str(error) else type(error).__name__


ELSEWHERE = (
    "or point the run at another store: `bayesflow run SPEC tracking.uri=sqlite:////<folder>/mlflow.db` "
    "(or `tracking.uri` in the spec, or MLFLOW_TRACKING_URI)"
)


def store_fault(error: BaseException, database: Path, doing: str = "") -> TrackingError:
    """A :class:`TrackingError` that says what is wrong with the SQLite store ``database``
    from ``error`` (an ``OSError``, a ``sqlite3`` error, or one that wraps them) and what
    to do; ``doing`` says what the run was writing."""
    kind, error = _diagnose(error, database.parent)
    folder = database.parent
    reason = _reason(error)
    what = f" ({doing}: {reason})" if doing else f" ({reason})"
    if kind == "read-only" and not doing and reason.lower() == "read-only file system":
        what = ""  # the message says it
    if kind == "full":
        return TrackingError(
            f"no space left on the disk that holds the tracking store {folder}{what}; free some "
            f"space there (`df -h {quote(str(folder))}` shows it) and run again: finished stages are kept "
            "in the cache, and the rerun logs them. The store itself holds "
            f"{_megabytes(_size(database))} in {database.name} and "
            f"{_megabytes(_size(folder / ARTIFACTS))} of artifacts in {ARTIFACTS}/; {ELSEWHERE}"
        )
    if kind in ("read-only", "denied"):
        state = "is on a read-only file system" if kind == "read-only" else "cannot be written by this user"
        return TrackingError(
            f"the tracking store {database} {state}{what}: a run writes its results there. "
            f"Make {folder} writable (remount it read-write), {ELSEWHERE}"
        )
    if kind == "locked":
        return TrackingError(
            f"the tracking store {database} is locked{what}: another process has held a write "
            f"transaction on it for over {STORE_BUSY_SECONDS:g} s. Find it with `fuser -v "
            f"{quote(str(database))}` (or `lsof`), let it finish or stop it, and run again; {ELSEWHERE}"
        )
    if kind == "damaged":
        return TrackingError(
            f"the tracking store {database} is not a usable SQLite database{what}. Move it "
            f"aside (`mv {quote(str(database))} {quote(str(database) + '.broken')}`) and run again to start a new "
            f"store; {ELSEWHERE}"
        )
    return TrackingError(
        f"cannot use the tracking store {database}{what}; check that {folder} is a folder "
        f"this user can write, {ELSEWHERE}"
    )
