"""What bayesflow mends in MLflow, in its own process, before it opens a store: where a
SQLite store's folder is made, and the tracebacks MLflow logs before raising an error that
:class:`~bayesflow.tracking.mlflow_tracker.MlflowTracker` words itself."""

from __future__ import annotations

import logging

from bayesflow.tracking.uri import sqlite_database

__all__ = ["mend_mlflow"]


def _make_parent_dirs(db_uri: str) -> None:
    """Make the folder of a SQLite store's file, its path read from the URI as SQLAlchemy
    reads it."""
    database = sqlite_database(db_uri)
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)


def mend_mlflow() -> None:
    """MLflow 3 makes the folder of a SQLite store from the URI's text, not unquoted
    (``mlflow.store.db.utils._make_parent_dirs_if_sqlite``): a store in ``a%20b?c/`` made
    an empty folder ``a%2520b%3Fc`` beside it. Its engine factory looks the function up on
    each call, so this process's replacement reads the path as SQLAlchemy does."""
    from mlflow.store.db import utils

    if hasattr(utils, "_make_parent_dirs_if_sqlite"):
        utils._make_parent_dirs_if_sqlite = _make_parent_dirs
    # MLflow logs the whole SQLAlchemy traceback of a failed session before raising the
    # error, which _translate words (full, read-only, locked store): the user sees it once.
    logger = logging.getLogger(utils.__name__)
    if not any(isinstance(known, _RaisedAnyway) for known in logger.filters):
        logger.addFilter(_RaisedAnyway())


class _RaisedAnyway(logging.Filter):
    """Drops the tracebacks MLflow logs for database errors it raises right after."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.levelno >= logging.ERROR)
