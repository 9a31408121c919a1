"""A report's data as one folder: the results table, the histories and the arrays per cell.

The report stage writes a bundle from the run's artefacts; ``bayesflow report RUN`` writes
one from the tracking store; a report template reads either with :func:`open`::

    data = bundle.open(bundle_path)
    frame = data.results()                 # one row per cell, ``cell`` the join key
    losses = data.histories("train_loss")  # long: method, temperature, seed, cell, step, value
    arrays = data.posteriors()             # {cell: {"samples" | "mean", "var", ...}}

Layout of the folder::

    results.json          the results table (columns and rows)
    histories.json        {cell: {key: {"steps": [...], "values": [...]}}}
    cells.json            {cell: {"posterior": path, "evaluation": path}} (relative)
    posteriors/<cell>.npz each cell's posterior.npz
    evaluations/<cell>.npz each cell's evaluation.npz, where it has one
    prior_predictive.npz  the prior predictive check, when it ran
    about.json            where the data came from (MLflow parent runs, when read from a store)

Files are hard-linked from the stage cache where the file system allows (cache entries
never change once written), else copied.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

__all__ = ["Bundle", "link_or_copy", "open", "write"]

RESULTS = "results.json"
HISTORIES = "histories.json"
CELLS = "cells.json"
ABOUT = "about.json"
PRIOR_PREDICTIVE = "prior_predictive.npz"
# Columns the histories share with the results table, to say whose each series is.
HISTORY_COLUMNS = ("method", "engine", "temperature", "seed", "cell")


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` at ``target``, or copy it where the file system cannot link."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _slug(cell: str) -> str:
    """A file name for a cell (``fit/sghmc/T=0.1/seed=0`` → ``fit__sghmc__T=0.1__seed=0``)."""
    return cell.replace("/", "__")


def _plain(value: Any) -> Any:
    """A JSON value: NaN and pandas' missing values become null, numpy scalars Python's."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        import pandas

        if value is pandas.NA:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    return value


def write(
    folder: str | Path,
    results: pandas.DataFrame,
    histories: Mapping[str, Mapping[str, Sequence[float] | Sequence[tuple[int, float]]]] | None = None,
    posteriors: Mapping[str, Path] | None = None,
    evaluations: Mapping[str, Path] | None = None,
    prior_predictive: Path | None = None,
    about: Mapping[str, Any] | None = None,
) -> Path:
    """Write a bundle into ``folder`` (created) and return it.

    Args:
        folder: where to write it.
        results: the results table, with a ``cell`` column.
        histories: ``{cell: {key: values}}``; values are per-epoch values (steps 0, 1,
            ...) or ``(step, value)`` pairs.
        posteriors: ``{cell: posterior.npz}``.
        evaluations: ``{cell: evaluation.npz}``.
        prior_predictive: the prior predictive check's ``.npz``.
        about: where the data came from (e.g. ``{"parent_run_ids": [...]}``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = {
        "columns": [str(column) for column in results.columns],
        "dtypes": {str(column): str(dtype) for column, dtype in results.dtypes.items()},
        "rows": [[_plain(value) for value in row] for row in results.itertuples(index=False)],
    }
    (folder / RESULTS).write_text(json.dumps(table), encoding="utf-8")
    series: dict[str, dict[str, dict[str, list[float]]]] = {}
    for cell, keys in (histories or {}).items():
        for key, values in keys.items():
            pairs = [tuple(value) if isinstance(value, (tuple, list)) else (step, value)
                     for step, value in enumerate(values)]
            series.setdefault(cell, {})[key] = {
                "steps": [int(step) for step, _ in pairs], "values": [float(value) for _, value in pairs],
            }
    (folder / HISTORIES).write_text(json.dumps(series), encoding="utf-8")
    files: dict[str, dict[str, str]] = {}
    for kind, paths in (("posterior", posteriors or {}), ("evaluation", evaluations or {})):
        for cell, path in paths.items():
            relative = f"{kind}s/{_slug(cell)}.npz"
            link_or_copy(Path(path), folder / relative)
            files.setdefault(cell, {})[kind] = relative
    (folder / CELLS).write_text(json.dumps(files, indent=1), encoding="utf-8")
    if prior_predictive is not None:
        link_or_copy(Path(prior_predictive), folder / PRIOR_PREDICTIVE)
    (folder / ABOUT).write_text(json.dumps(dict(about or {}), indent=1), encoding="utf-8")
    return folder


def open(path: str | Path) -> Bundle:
    """The bundle in the folder ``path``.

    Raises:
        FileNotFoundError: ``path`` holds no bundle (no ``results.json``).
    """
    folder = Path(path)
    if not (folder / RESULTS).is_file():
        raise FileNotFoundError(
            f"{folder} holds no report bundle (no {RESULTS}); pass the folder the report "
            "stage or `bayesflow report` wrote"
        )
    return Bundle(folder)


class Bundle:
    """A report's data, read from a bundle folder (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[str, dict[str, str]] = json.loads((folder / CELLS).read_text(encoding="utf-8"))
        self._about: dict[str, Any] = json.loads((folder / ABOUT).read_text(encoding="utf-8"))

    @property
    def parent_run_ids(self) -> list[str]:
        """The MLflow parent runs the data were read from; empty for a report stage's."""
        return list(self._about.get("parent_run_ids", []))

    def results(self) -> pandas.DataFrame:
        """The results table: one row per cell (see :func:`bayesflow.stages.table.results_table`)."""
        import pandas

        table = json.loads((self.folder / RESULTS).read_text(encoding="utf-8"))
        frame = pandas.DataFrame(table["rows"], columns=table["columns"])
        for column, dtype in table["dtypes"].items():
            if dtype == "object":
                continue
            if dtype.startswith(("int", "Int")) and frame[column].isna().any():
                dtype = "Int64"
            frame[column] = frame[column].astype(dtype)
        return frame

    def history_keys(self) -> list[str]:
        """Every history key some cell has, sorted."""
        series = self._series()
        return sorted({key for keys in series.values() for key in keys})

    def histories(self, key: str = "train_loss") -> pandas.DataFrame:
        """The per-epoch history ``key`` of every cell as a long table.

        Columns: ``method``, ``engine``, ``temperature``, ``seed``, ``cell``, ``step``,
        ``value``; empty when no cell has ``key``.
        """
        import pandas

        frame = self.results().set_index("cell", drop=False)
        rows = []
        for cell, keys in self._series().items():
            if key not in keys or cell not in frame.index:
                continue
            coordinates = {column: frame.at[cell, column] for column in HISTORY_COLUMNS}
            for step, value in zip(keys[key]["steps"], keys[key]["values"]):
                rows.append({**coordinates, "step": step, "value": value})
        return pandas.DataFrame(rows, columns=[*HISTORY_COLUMNS, "step", "value"])

    def episode_losses(self) -> pandas.DataFrame:
        """Every continual fit's test NLL on each episode's test data after each episode
        trained on (``trace/episode_nll/<j>``) as one long table: the columns of
        :meth:`histories`, ``episode`` (j) and ``trained on`` (episodes seen, from 1)."""
        import pandas

        curves: list[pandas.DataFrame] = []
        while not (history := self.histories(f"trace/episode_nll/{len(curves)}")).empty:
            curves.append(history.assign(episode=len(curves)))
        columns = [*HISTORY_COLUMNS, "step", "value", "episode"]
        losses = pandas.concat(curves) if curves else pandas.DataFrame(columns=columns)
        return losses.assign(**{"trained on": losses["step"] + 1})

    def posteriors(self) -> dict[str, dict[str, Any]]:
        """Every cell's ``posterior.npz`` arrays by cell: ``samples`` (S, d), or ``mean``
        with ``var`` or ``cov``, and ``param_names``."""
        return self._arrays("posterior")

    def evaluations(self) -> dict[str, dict[str, Any]]:
        """Every cell's ``evaluation.npz`` arrays by cell (cells without one left out)."""
        return self._arrays("evaluation")

    def prior_predictive(self) -> dict[str, Any] | None:
        """The prior predictive check's arrays, or None when it did not run."""
        path = self.folder / PRIOR_PREDICTIVE
        return _load(path) if path.is_file() else None

    def _series(self) -> dict[str, dict[str, dict[str, list[float]]]]:
        return json.loads((self.folder / HISTORIES).read_text(encoding="utf-8"))  # type: ignore[no-any-return]

    def _arrays(self, kind: str) -> dict[str, dict[str, Any]]:
        return {
            cell: _load(self.folder / files[kind]) for cell, files in self._files.items() if kind in files
        }


def _load(path: Path) -> dict[str, Any]:
    import numpy as np

    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}
