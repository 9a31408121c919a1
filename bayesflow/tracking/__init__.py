"""Tracking: where runs, metrics and artifacts are recorded; MLflow is a sink.

:class:`MlflowTracker` writes to a real MLflow store (and is the only code that imports
mlflow, lazily); :class:`InMemoryTracker` is its test double. Both satisfy
:class:`Tracker`. :func:`results_frame` turns a set of fit runs into one table.

:mod:`bayesflow.tracking.hook` writes a run's stages to a tracker after their artefacts
exist; :mod:`bayesflow.tracking.read` reads finished runs back for people (``bayesflow.
results``, ``histories``, ``posteriors``, ...), never for a stage. Neither is imported
here, so ``import bayesflow.tracking`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayesflow.tracking.base import (
    PARENT_TAG,
    RUN_NAME_TAG,
    RUN_STATUSES,
    STAGES_ARTIFACT,
    RunRecord,
    Tracker,
)
from bayesflow.tracking.memory import InMemoryTracker
from bayesflow.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri

if TYPE_CHECKING:
    import pandas

__all__ = [
    "PARENT_TAG",
    "RUN_NAME_TAG",
    "RUN_STATUSES",
    "STAGES_ARTIFACT",
    "SWEEP_COLUMNS",
    "InMemoryTracker",
    "MlflowTracker",
    "RunRecord",
    "Tracker",
    "records_frame",
    "resolve_tracking_uri",
    "results_frame",
]

# The sweep coordinates every fit run carries as params (docs/design.md, "Contracts").
SWEEP_COLUMNS = ("method", "engine", "temperature", "seed")


def results_frame(tracker: Tracker, run_ids: list[str]) -> pandas.DataFrame:
    """One row per run: its sweep coordinates, status and every metric.

    Args:
        tracker: the store the runs live in.
        run_ids: the runs to tabulate (usually the fit children of one parent run).

    Returns:
        A frame with columns ``method``, ``engine`` (str), ``temperature`` (float),
        ``seed`` (int; pandas' nullable ``Int64`` when some run lacks it), ``status``, one
        float column per metric name seen in any run (NaN where a run lacks it),
        ``run_id`` and ``run_name``; sorted by method, temperature, seed.
    """
    return records_frame([tracker.get_run(run_id) for run_id in run_ids])


def _variant_columns(record: RunRecord) -> dict[str, str]:
    """A sweep's fit run: ``variant`` (its label) and ``swept/<key>`` (raw values), from its
    ``bayesflow.variant`` and ``bayesflow.swept`` tags; {} outside a sweep."""
    import json

    if "bayesflow.variant" not in record.tags:
        return {}
    swept = json.loads(record.tags.get("bayesflow.swept") or "{}")
    return {"variant": record.tags["bayesflow.variant"], **{f"swept/{k}": str(v) for k, v in swept.items()}}


def records_frame(records: list[RunRecord]) -> pandas.DataFrame:
    """:func:`results_frame` of run records already read."""
    import pandas

    metric_names = sorted({name for record in records for name in record.metrics})
    rows = [
        {
            "method": record.params.get("method"),
            "engine": record.params.get("engine"),
            "temperature": record.params.get("temperature"),
            "seed": record.params.get("seed"),
            "status": record.status,
            **_variant_columns(record),
            **{name: record.metrics.get(name, float("nan")) for name in metric_names},
            "run_id": record.run_id,
            "run_name": record.run_name,
        }
        for record in records
    ]
    labels = sorted({name for row in rows for name in row if name == "variant" or name.startswith("swept/")})
    columns = [*SWEEP_COLUMNS, "status", *labels, *metric_names, "run_id", "run_name"]
    frame = pandas.DataFrame(rows, columns=columns)
    frame["temperature"] = pandas.to_numeric(frame["temperature"], errors="coerce").astype(float)
    seeds = pandas.to_numeric(frame["seed"], errors="coerce")
    frame["seed"] = seeds.astype("int64") if seeds.notna().all() else seeds.astype("Int64")
    for name in metric_names:
        frame[name] = frame[name].astype(float)
    frame = frame.sort_values(["method", "temperature", "seed"], kind="stable", na_position="last")
    return frame.reset_index(drop=True)
