"""Tracking URIs: where runs go by default, made independent of the working directory,
a quick probe of a tracking server before MLflow's client retries for minutes, and the
lock under which a SQLite store is created.

A SQLite URI is built from a path and read back into one by :func:`sqlite_uri` and
:func:`sqlite_database` only, with :mod:`urllib.parse` quoting as SQLAlchemy parses it
(``sqlalchemy.engine.make_url`` takes what follows ``?`` as a query and unquotes ``%XX``):
a folder named ``a%20b?c#d`` is a valid place for a store, never ``a b`` beside it.

No function here imports mlflow or SQLAlchemy, so the command line can name a store cheaply.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote

from bayesflow.errors import TrackingError

__all__ = [
    "DEFAULT_TRACKING_URI", "PROBE_SECONDS", "SQLITE_PREFIX", "STORE_LOCK_SECONDS", "missing_store",
    "probe_server", "resolve_tracking_uri", "sqlite_database", "sqlite_uri", "store_lock",
]

SQLITE_PREFIX = "sqlite:///"

# Where runs go when neither the spec, the command line nor MLFLOW_TRACKING_URI says.
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def sqlite_uri(database: Path) -> str:
    """The ``sqlite:///`` URI of the database file ``database`` (absolute or not), its path
    percent-quoted so that SQLAlchemy reads back exactly this path (``%``, ``?``, ``#``,
    spaces and non-ASCII letters included)."""
    return SQLITE_PREFIX + quote(str(database), safe="/")


def sqlite_database(uri: str) -> Path | None:
    """The database file a ``sqlite:///`` URI names, unquoted as SQLAlchemy does; None for
    another scheme or an in-memory store."""
    if not uri.startswith(SQLITE_PREFIX):
        return None
    database = unquote(uri[len(SQLITE_PREFIX) :].split("?", 1)[0])
    return None if database in ("", ":memory:") else Path(database)


def resolve_tracking_uri(uri: str | None, base: Path) -> str:
    """Make a tracking URI independent of the working directory.

    No URI (a spec's `tracking.uri: null`, no `--tracking-uri`) means MLflow's own
    ``MLFLOW_TRACKING_URI`` environment variable when it is set, else
    ``sqlite:///mlflow.db`` in the working directory.

    ``sqlite:///mlflow.db`` names a path relative to the working directory; it becomes
    ``sqlite:////<base>/mlflow.db``, quoted by :func:`sqlite_uri` (an absolute SQLite path
    is quoted the same way, naming the same file). A plain relative or absolute path
    becomes a ``file:`` URI. Every other scheme (``http``, ``file``, ``databricks``) is
    returned unchanged.

    Args:
        uri: the tracking URI as a user wrote it.
        base: the folder relative paths are taken from (usually the working directory).
    """
    if uri is None:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    database = sqlite_database(uri)
    if database is not None:
        query = uri.partition("?")[2]
        path = database if database.is_absolute() else (base / database).resolve()
        return sqlite_uri(path) + (f"?{query}" if query else "")
    if "://" in uri or uri.startswith("file:"):
        return uri
    folder = Path(uri)
    return (folder if folder.is_absolute() else base / folder).resolve().as_uri()


# Seconds to wait for a tracking server to accept a connection before saying it is down:
# MLflow's own client would retry a refused connection for minutes, without a word.
PROBE_SECONDS = 5.0


def probe_server(uri: str, timeout: float = PROBE_SECONDS) -> None:
    """Fail fast, naming the URI, when an ``http(s)`` tracking server does not answer.

    Raises:
        TrackingError: the host cannot be resolved or refuses or does not accept the
            connection within ``timeout`` seconds.
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise TrackingError(
            f"the tracking server {uri} does not answer ({reason}, waited at most "
            f"{timeout:g} s); start it (`mlflow server --port {port}`), or point "
            "`tracking.uri` / MLFLOW_TRACKING_URI at a store that exists (e.g. "
            "sqlite:///mlflow.db)"
        ) from None


def missing_store(uri: str) -> bool:
    """Whether ``uri`` names a SQLite store whose file is not there. Reading from it would
    make MLflow create an empty store and then call every run unknown."""
    database = sqlite_database(uri)
    return database is not None and not database.is_file()


# Creating or upgrading a SQLite store takes seconds; a process that waits longer than
# this for another one to do it is stuck, and says so.
STORE_LOCK_SECONDS = 300.0


@contextmanager
def store_lock(uri: str, timeout: float = STORE_LOCK_SECONDS) -> Iterator[None]:
    """Hold ``<database>.lock``, beside a SQLite store's file, while MLflow opens the store.

    Opening a SQLite store creates its tables or migrates them (Alembic), and two processes
    doing it at once break each other ("duplicate column name", "Online migration expected
    to match one row"). Runs with different cache folders do not share the cache's lock,
    but they share the store when they run in one folder: this lock serialises the
    creation. It is an ``flock`` (:class:`bayesflow.dag.lock.FileLock`), given back by the
    kernel when its holder dies. Other URIs (a server, an in-memory store), and a store
    that exists in a folder this process cannot write, take no lock.

    Raises:
        TrackingError: the lock file cannot be made, or another process held the lock for
            ``timeout`` seconds.
    """
    database = sqlite_database(uri)
    if database is None:
        yield
        return
    folder = database.parent
    if database.is_file() and folder.is_dir() and not os.access(folder, os.W_OK):
        yield  # a store in a read-only folder is read, never created or migrated here
        return
    from bayesflow.dag.lock import FileLock
    from bayesflow.errors import CacheLockError

    lock = FileLock(
        database.with_name(database.name + ".lock"), timeout=timeout, notify=lambda line: None,
        name=f"tracking store {database}",
        fix="it is still creating or upgrading the store; let it finish, or point `tracking.uri` "
            "at another store",
    )
    try:
        lock.acquire()
    except CacheLockError as error:
        raise TrackingError(str(error).replace("execution.cache_dir", "tracking.uri")) from None
    try:
        yield
    finally:
        lock.release()
