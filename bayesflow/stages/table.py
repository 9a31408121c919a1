"""The results of a run as tables, built from the fit and evaluate artefacts.

The plot and report stages read every cell's fit and evaluation (the ones that finished;
the others come as ``missing``, with their status and error) and tabulate them here,
never from the tracking store. A *cell* is one fit stage of the plan (its name, e.g.
``fit/sghmc/T=0.1/seed=0``, is the join key); the plan lists them in a plot or report
stage's ``config["cells"]`` with their sweep coordinates.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.dag.plan import Plan
from bayesflow.errors import RegistryError
from bayesflow.methods.registry import traits_of
from bayesflow.stages.artefacts import Artefact, EvaluationArtefact, FitArtefact, read

if TYPE_CHECKING:
    import pandas

    from bayesflow.dag.scheduler import Outcome

__all__ = [
    "FLAG_COLUMN", "RESULT_COLUMNS", "cell_files", "cells_of", "fit_flags_of", "fit_metrics", "histories_of", "outcome_results",
    "results_table",
]

# The column of a flag on ``metric`` (bayesflow.evaluate.flags); the report reads it.
FLAG_COLUMN = "flag/{metric}"
# The sweep coordinates and status every row has, before its metrics.
RESULT_COLUMNS = ("method", "engine", "temperature", "temperature_shared", "seed", "status")
FINISHED, FAILED, SKIPPED = "FINISHED", "FAILED", "SKIPPED"


def results_table(
    cells: list[dict[str, Any]],
    artefacts: Mapping[str, Artefact],
    missing: Mapping[str, Mapping[str, str]] | None = None,
) -> pandas.DataFrame:
    """One row per cell: its coordinates, status, every metric, ``cell`` and ``error``.

    Args:
        cells: the plan's cells (``cell``, ``evaluation``, ``method``, ``engine``,
            ``temperature`` (None when shared by every temperature), ``seed``).
        artefacts: finished stages' artefacts by stage name.
        missing: stages that did not finish, by name: ``{"status": "failed" | "skipped",
            "error": text}``.

    Returns:
        The columns of :func:`bayesflow.results` (less the MLflow ids): ``method``,
        ``engine``, ``temperature`` (0 for a fit shared by every temperature),
        ``temperature_shared``, ``seed``, ``status`` (``FINISHED``, ``FAILED`` or
        ``SKIPPED``), one float column per metric (the fit's ``fit_seconds``, ``steps``
        and summary diagnostics, the last value of each history, the evaluation's
        metrics), one string column ``flag/<metric>`` per metric of
        :data:`~bayesflow.evaluate.flags.FLAGGED_METRICS` (the flag's message, "" when
        none; :func:`fit_flags_of`), then ``cell`` and ``error``; sorted by method,
        temperature, seed.
    """
    import pandas

    from bayesflow.evaluate.flags import FLAGGED_METRICS  # bayesflow.evaluate loads torch

    missing = missing or {}
    rows = []
    flag_columns = [FLAG_COLUMN.format(metric=metric) for metric in FLAGGED_METRICS]
    for cell in cells:
        fit, evaluation = artefacts.get(cell["cell"]), artefacts.get(cell["evaluation"])
        status, error = _status(cell, fit, evaluation, missing)
        metrics: dict[str, float] = {}
        flags = dict.fromkeys(flag_columns, "")
        if isinstance(fit, FitArtefact):
            metrics.update(fit_metrics(fit))
            flags.update({FLAG_COLUMN.format(metric=metric): message
                          for metric, message in fit_flags_of(fit, cell["engine"]).items()})
        if isinstance(evaluation, EvaluationArtefact):
            metrics.update(evaluation.metrics)
        rows.append({
            "method": cell["method"], "engine": cell["engine"],
            "temperature": 0.0 if cell["temperature"] is None else float(cell["temperature"]),
            "temperature_shared": cell["temperature"] is None, "seed": int(cell["seed"]),
            "status": status, **metrics, **flags, "cell": cell["cell"], "error": error, **_variant_of(cell),
        })
    # A sweep's cells name their variant (a string column) and swept values (raw strings).
    labels = sorted({name for row in rows for name in row if name == "variant" or name.startswith("swept/")})
    named = {*RESULT_COLUMNS, "cell", "error", *labels, *flag_columns}
    metric_names = sorted({name for row in rows for name in row} - named)
    columns = [*RESULT_COLUMNS, *labels, *metric_names, *flag_columns, "cell", "error"]
    frame = pandas.DataFrame(rows, columns=columns)
    for name in ("temperature", *metric_names):
        frame[name] = pandas.to_numeric(frame[name], errors="coerce").astype(float)
    frame["seed"] = frame["seed"].astype("int64")
    frame["temperature_shared"] = frame["temperature_shared"].astype(bool)
    frame = frame.sort_values(["method", "temperature", "seed"], kind="stable")
    return frame.reset_index(drop=True)


def _variant_of(cell: dict[str, Any]) -> dict[str, str]:
    """``variant`` and ``swept/<key>`` of a sweep's cell ({} outside a sweep)."""
    if not cell.get("variant"):
        return {}
    return {"variant": cell["variant"], **{f"swept/{key}": str(value) for key, value in cell["swept"].items()}}


def fit_flags_of(fit: FitArtefact, engine: str | None) -> dict[str, str]:
    """The flags of a fit (:func:`bayesflow.evaluate.flags.fit_flags`), ``{metric:
    message}``; its loss is checked for convergence when its method declares the
    ``loss_convergence`` diagnostic (variational inference)."""
    from bayesflow.evaluate.flags import fit_flags

    try:
        minimises_loss = engine is not None and "loss_convergence" in traits_of(engine).diagnostics
    except RegistryError:  # an engine this version does not know (an old cache entry)
        minimises_loss = False
    return fit_flags(fit.diagnostics, fit.history, minimises_loss=minimises_loss)


def fit_metrics(fit: FitArtefact) -> dict[str, float]:
    """The metrics a fit's MLflow run holds: its summary metrics and the last value of
    each series (``train_loss``, ``trace/<name>``), as MLflow keeps a history's latest."""
    metrics = fit.metrics()
    metrics.update({key: values[-1] for key, values in fit.series().items() if values})
    return metrics


def histories_of(cells: list[dict[str, Any]], artefacts: Mapping[str, Artefact]) -> dict[str, dict[str, list[float]]]:
    """Every finished cell's per-epoch series by cell name (:meth:`FitArtefact.series`)."""
    found = {}
    for cell in cells:
        fit = artefacts.get(cell["cell"])
        if isinstance(fit, FitArtefact):
            found[cell["cell"]] = fit.series()
    return found


def cell_files(
    cells: list[dict[str, Any]], artefacts: Mapping[str, Artefact]
) -> tuple[dict[str, Path], dict[str, Path]]:
    """The ``posterior.npz`` and ``evaluation.npz`` of every cell that has them, by cell."""
    posteriors, evaluations = {}, {}
    for cell in cells:
        fit, evaluation = artefacts.get(cell["cell"]), artefacts.get(cell["evaluation"])
        if isinstance(fit, FitArtefact):
            posteriors[cell["cell"]] = fit.posterior
        if isinstance(evaluation, EvaluationArtefact) and evaluation.file is not None:
            evaluations[cell["cell"]] = evaluation.file
    return posteriors, evaluations


def _status(
    cell: dict[str, Any], fit: Artefact | None, evaluation: Artefact | None,
    missing: Mapping[str, Mapping[str, str]],
) -> tuple[str, str]:
    """A cell's status and error: its fit's when the fit did not finish, else its
    evaluation's."""
    for name, artefact in ((cell["cell"], fit), (cell["evaluation"], evaluation)):
        if artefact is None:
            reason = missing.get(name, {})
            status = FAILED if reason.get("status") == "failed" else SKIPPED
            return status, str(reason.get("error") or f"{name} did not run")
    return FINISHED, ""


def cells_of(plan: Plan) -> list[dict[str, Any]]:
    """The cells of a plan: one per evaluate stage, with its fit and sweep coordinates
    (the form of a plot or report stage's ``config["cells"]``)."""
    return [
        {"cell": stage.name.replace("evaluate/", "fit/", 1), "evaluation": stage.name,
         "method": stage.method, "engine": stage.engine, "temperature": stage.temperature,
         "seed": stage.seed, **({"variant": stage.variant, "swept": dict(stage.swept)} if stage.swept else {})}
        for stage in plan.order() if stage.kind == "evaluate"
    ]


def outcome_results(plan: Plan, outcome: Outcome) -> pandas.DataFrame:
    """The results table of an executed plan (:func:`results_table`), from the outcome's
    cache entries: what ``bayesflow run`` reports without reading the tracking store."""
    cells = cells_of(plan)
    names = {name for cell in cells for name in (cell["cell"], cell["evaluation"])}
    artefacts = {
        name: read(plan.stages[name].kind, entry)
        for name, entry in outcome.entries.items() if name in names
    }
    missing = {
        name: {"status": status, "error": outcome.errors.get(name, "")}
        for name, status in outcome.status.items() if name in names and name not in artefacts
    }
    return results_table(cells, artefacts, missing)
