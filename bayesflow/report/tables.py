"""Tables over a results frame: means over seeds, the best temperature of each method,
the flags raised on fits, and the comparison of sweep variants.

Besides the columns :mod:`bayesflow.report.figures` describes, a results frame may hold:

- ``flag/<column>``: a short message when something about a fit's ``<column>`` is out of
  its expected range (``flag/kinetic_temperature_ratio``: a sampler ran hot;
  ``flag/train_loss``: a VI fit's ELBO did not converge), ``""`` when nothing is;
- ``variant`` (with ``swept/<key>`` columns): which point of a sweep over spec keys
  (``bayesflow run spec.yaml -m prior.variance=0.1,1``) a fit belongs to.

Every function works whether those columns exist or not; without them the tables are
those of a plain temperature × seed study.

The best temperature (and, in a sweep, the best variant) is chosen on the *validation*
rows when the fits logged ``val_*`` metrics (``data.validation_fraction``) and the *test*
metrics are reported at that choice, so they took no part in it; without validation
metrics it is chosen on the test metric it reports, and the tables say so (``chosen on``). A number whose fits carry a flag for its
column is followed by :data:`MARK`; a flag on a column the table does not show marks
the ``finished`` count of its row. Nothing here draws or escapes: callers that put the
text into Markdown escape it (:func:`bayesflow.report.sections.escape`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from bayesflow.temperature import TEMPERATURE_FREE

__all__ = [
    "AGREEMENT_METRICS",
    "CHOSEN_ON",
    "FINISHED",
    "MARK",
    "best_cells",
    "best_choices",
    "best_temperature_table",
    "best_temperatures",
    "best_variants",
    "failed_cells",
    "flag_columns",
    "flag_notes",
    "flagged_rows",
    "results_table",
    "selection_metric",
    "summary_metrics",
    "temperature_free",
    "temperature_independent",
    "variant_table",
    "variants",
]

FINISHED = "FINISHED"  # MLflow's status of a run that ended without error
FLAG_PREFIX = "flag/"  # stages/table.py names the columns: FLAG_COLUMN = "flag/{metric}"
MARK = "⚠"
"""Follows a number that a flag concerns; the flags are listed under the table."""

TABLE_METRICS = ("test_nll", "test_perplexity", "test_accuracy", "test_ece", "test_brier", "test_rmse")
CHOSEN_ON = "chosen on"  # the column saying which rows chose the best temperature
# The evaluate stage names a test metric computed on the validation rows ``val_<name>``
# (bayesflow.evaluate.conventions.VALIDATION_PREFIX; the report does not import it).
VALIDATION_PREFIX = "val_"
AGREEMENT_METRICS = ("agreement", "total_variation", "wasserstein_2")
"""The scores of a predictive against ``evaluate.reference``'s (docs/metrics.md)."""
SECOND_METRICS = ("test_accuracy", "test_rmse")  # classification, regression


def failed_cells(frame: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Return the rows that did not finish or whose ``metric`` is missing.

    Args:
        frame: a results frame.
        metric: also count a finished run without a finite value of this metric as
            failed; None looks at the status only.
    """
    failed = frame["status"].astype(str) != FINISHED
    if metric is not None:
        values = frame[metric] if metric in frame.columns else pd.Series(np.nan, frame.index)
        failed |= ~np.isfinite(pd.to_numeric(values, errors="coerce"))
    return frame.loc[failed]


def summary_metrics(frame: pd.DataFrame) -> list[str]:
    """The summary metrics the frame holds a value of, in the order tables show them:
    NLL, then accuracy, ECE and Brier (classification) or RMSE and the interval
    coverages (regression)."""
    coverages = sorted(
        (column for column in frame.columns if column.startswith("test_coverage_")),
        key=lambda column: float(column.rsplit("_", 1)[1]) if _is_number(column.rsplit("_", 1)[1]) else 0.0,
    )
    return [
        metric for metric in [*TABLE_METRICS, *coverages]
        if metric in frame.columns and pd.to_numeric(frame[metric], errors="coerce").notna().any()
    ]


def variants(frame: pd.DataFrame) -> list[str]:
    """The sweep variants of the frame in order of first appearance; empty when the frame
    has no ``variant`` column or only one variant (a plain study)."""
    if "variant" not in frame.columns:
        return []
    found = [str(value) for value in pd.unique(frame["variant"].dropna())]
    return found if len(found) > 1 else []


def flag_columns(frame: pd.DataFrame) -> dict[str, str]:
    """``{column: "flag/column"}`` for every flag column of the frame."""
    return {c[len(FLAG_PREFIX):]: c for c in frame.columns if str(c).startswith(FLAG_PREFIX)}


def _messages(values: pd.Series) -> pd.Series:
    """Flag values as stripped strings, ``""`` for no flag (empty, None or NaN)."""
    return values.map(lambda value: "" if value is None or value is pd.NA or (
        isinstance(value, float) and np.isnan(value)) else str(value).strip())


def flagged_rows(frame: pd.DataFrame, columns: Iterable[str] | None = None) -> pd.Series:
    """True for each row carrying a flag on one of ``columns`` (None: on any column)."""
    flags = flag_columns(frame)
    wanted = flags if columns is None else {c: flags[c] for c in columns if c in flags}
    result = pd.Series(False, index=frame.index)
    for flag in wanted.values():
        result |= _messages(frame[flag]) != ""
    return result


def flag_notes(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per flag raised on a finished fit: (``variant``,) ``method``,
    ``temperature``, ``seed``, ``column`` (what it concerns) and ``message``."""
    keyed = ["variant"] if variants(frame) else []
    columns = [*keyed, "method", "temperature", "seed", "column", "message"]
    finished = frame.loc[frame["status"].astype(str) == FINISHED] if "status" in frame else frame
    rows = []
    for column, flag in flag_columns(finished).items():
        messages = _messages(finished[flag])
        for index in messages.index[messages != ""]:
            row = finished.loc[index]
            rows.append({**{key: row[key] for key in [*keyed, "method", "temperature", "seed"]},
                         "column": column, "message": messages[index]})
    notes = pd.DataFrame(rows, columns=columns)
    return notes.sort_values([*keyed, "method", "temperature", "seed"], kind="stable").reset_index(drop=True)


def results_table(frame: pd.DataFrame, metrics: Iterable[str] = TABLE_METRICS) -> pd.DataFrame:
    """Summarise each metric as ``"mean ± sd"`` over seeds per method and temperature
    (and per variant, for a sweep).

    Args:
        frame: a results frame.
        metrics: the metric columns to summarise; those the frame lacks are left out.

    Returns:
        One row per (variant,) method and temperature in order of first appearance and
        rising temperature, with ``method``, ``temperature``, ``finished``
        ("finished/total" fits) and one formatted string column per metric. Failed fits
        are left out of the mean; a cell with no finished fit reads ``"failed"``. A
        value whose fits carry a flag on its column is followed by :data:`MARK`, and
        ``finished`` is when a flag concerns a column the table does not show.
    """
    metrics = [metric for metric in metrics if metric in frame.columns]
    keys = (["variant"] if variants(frame) else []) + ["method", "temperature"]
    other_flags = [column for column in flag_columns(frame) if column not in metrics]
    rows = []
    for values, group in frame.groupby(keys, sort=False):
        finished = group.loc[group["status"].astype(str) == FINISHED]
        row = dict(zip(keys, values))
        row["temperature"] = float(row["temperature"])
        row["finished"] = _marked(f"{len(finished)}/{len(group)}", finished, other_flags)
        for metric in metrics:
            row[metric] = _marked(mean_and_spread(finished[metric]), finished, [metric])
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*keys, "finished", *metrics])
    return _in_order(table, frame, keys).reset_index(drop=True)


def selection_metric(metric: str) -> str:
    """The validation counterpart of a test metric: ``val_nll`` for ``test_nll``."""
    return VALIDATION_PREFIX + metric.removeprefix("test_")


def best_temperature_table(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """For each method (and variant), the temperature with the best mean over seeds of
    ``metric`` on the validation rows (its ``val_`` counterpart) when the fits logged it,
    else of ``metric`` itself (the lowest: the metric is a loss such as the NLL); with
    ``metric``'s mean ± sd there, the accuracy (classification) or RMSE (regression)
    there, which rows chose it, the validation value when those did, and how many seeds
    finished.

    A method whose fit does not depend on the temperature (``temperature_shared``,
    logged at T = 0: MAP, ensembles, maximum likelihood) has one row, its temperature
    reading :data:`~bayesflow.temperature.TEMPERATURE_FREE` (``"T → 0"``). Flags mark the numbers as in :func:`results_table`.

    Returns:
        Columns (``variant``,) ``method``, ``best T``, :data:`CHOSEN_ON` (``validation``
        or ``test``), ``metric``, the second metric when the frame has one, the
        validation metric when some row was chosen on it, and ``seeds finished``; empty
        when the frame lacks ``metric``.
    """
    second = next((m for m in SECOND_METRICS if m in summary_metrics(frame)), None)
    validation = selection_metric(metric)
    shown = [metric] + ([second] if second else [])
    keyed = ["variant"] if variants(frame) else []
    columns = [*keyed, "method", "best T", CHOSEN_ON, *shown, "seeds finished"]
    if metric not in frame.columns:
        return pd.DataFrame(columns=columns)
    values = _numeric(frame, [*shown, validation])
    rows = []
    for key, best, cell, done, chosen in _best(values, keyed, metric):
        row = dict(zip([*keyed, "method"], key))
        row["best T"] = (
            TEMPERATURE_FREE if temperature_independent(cell) else ("—" if best is None else f"{best:g}")
        )
        row[CHOSEN_ON] = "validation" if chosen == validation else "test"
        for name in shown:
            row[name] = _marked(mean_and_spread(done[name]), done, [name])
        row[validation] = mean_and_spread(done[validation]) if chosen == validation else "—"
        row["seeds finished"] = _marked(
            f"{done['seed'].nunique()}/{cell['seed'].nunique()}", done,
            [c for c in flag_columns(frame) if c not in shown],
        )
        rows.append(row)
    if any(row[CHOSEN_ON] == "validation" for row in rows):
        columns.insert(columns.index("seeds finished"), validation)
    return pd.DataFrame(rows, columns=columns)


def best_cells(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """The rows of ``frame`` at each method's (and variant's) best temperature, as
    :func:`best_temperature_table` picks it: to list the flags of those fits only."""
    if metric not in frame.columns:
        return frame.iloc[:0]
    values = _numeric(frame, [metric, selection_metric(metric)])
    keyed = ["variant"] if variants(frame) else []
    index = [i for _, _, cell, _, _ in _best(values, keyed, metric) for i in cell.index]
    return frame.loc[index]


def best_temperatures(
    frame: pd.DataFrame, metric: str = "test_nll"
) -> dict[Any, tuple[float | None, str, pd.DataFrame]]:
    """Per method, over all its rows (variants are not told apart): the temperature
    :func:`best_temperature_table` would choose (validation ``metric`` when the method's
    fits logged it, else ``metric`` itself; None when none finished), the column that
    chose it, and the finished rows there. For another table that names a best
    temperature (the evidence table), so that every "best" of the report is one choice."""
    if metric not in frame.columns:
        return {}
    values = _numeric(frame, [metric, selection_metric(metric)])
    return {key[0]: (best, chosen, frame.loc[done.index])
            for key, best, _, done, chosen in _best(values, [], metric)}


def best_choices(
    frame: pd.DataFrame, metric: str = "test_nll", higher: bool = False
) -> list[tuple[tuple[Any, ...], float | None, str, pd.DataFrame]]:
    """Per (variant,) method, as :func:`best_temperature_table` chooses (``higher``: the
    highest mean, for a score such as an AUROC): its key, the best temperature (None
    when no fit finished), the column that chose it and the finished rows there."""
    if metric not in frame.columns:
        return []
    values = _numeric(frame, [metric, selection_metric(metric)])
    keyed = ["variant"] if variants(frame) else []
    return [(key, best, chosen, frame.loc[done.index])
            for key, best, _, done, chosen in _best(values, keyed, metric, higher)]


def best_variants(frame: pd.DataFrame, metric: str = "test_nll") -> dict[str, tuple[str, str]]:
    """In a sweep, per method: the variant whose best temperature (as
    :func:`best_temperature_table` chooses it) has the lowest mean of the metric that
    chose it, and which rows that was (``"validation"`` or ``"test"``). When only some
    variants have validation metrics, all are compared on ``metric``. {} for a plain study."""
    if not variants(frame) or metric not in frame.columns:
        return {}
    values = _numeric(frame, [metric, selection_metric(metric)])
    found: dict[str, list[tuple[str, str, float]]] = {}
    for (variant, method), _, _, done, chosen in _best(values, ["variant"], metric):
        if not done.empty:
            found.setdefault(str(method), []).append((str(variant), chosen, float(done[chosen].mean())))
    winners = {}
    for method, choices in found.items():
        if len({chosen for _, chosen, _ in choices}) > 1:
            choices = [(variant, metric, _lowest_mean(values, variant, method, metric)) for variant, _, _ in choices]
        variant, chosen, _ = min(choices, key=lambda choice: choice[2])
        winners[method] = (variant, "test" if chosen == metric else "validation")
    return winners


def _numeric(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The frame with those of ``metrics`` it holds as numbers (NaN where not)."""
    return frame.assign(**{m: pd.to_numeric(frame[m], errors="coerce") for m in metrics if m in frame.columns})


def _lowest_mean(values: pd.DataFrame, variant: str, method: str, metric: str) -> float:
    """The lowest mean ``metric`` over temperatures of one variant's method (finished fits)."""
    rows = values.loc[(values["variant"].astype(str) == variant) & (values["method"].astype(str) == method)]
    means = rows.loc[rows["status"].astype(str) == FINISHED].groupby("temperature")[metric].mean()
    return float(means.min()) if means.notna().any() else float("inf")


def _best(
    values: pd.DataFrame, keyed: list[str], metric: str, higher: bool = False
) -> Iterator[tuple[tuple[Any, ...], float | None, pd.DataFrame, pd.DataFrame, str]]:
    """Per (variant,) method: its key, the temperature of lowest (``higher``: highest)
    mean over the finished seeds of ``metric``'s validation counterpart when the
    method's fits logged it (else of ``metric``; None when none finished), the rows at
    that temperature, the finished ones among them, and the column that chose it."""
    validation = selection_metric(metric)
    for key, group in values.groupby([*keyed, "method"], sort=False):
        chosen = metric
        if validation in group.columns and np.isfinite(group[validation]).any():
            chosen = validation
        finished = group.loc[(group["status"].astype(str) == FINISHED) & np.isfinite(group[chosen])]
        means = finished.groupby("temperature")[chosen].mean()
        best = float((-means if higher else means).idxmin()) if not means.empty else None
        at = float(group["temperature"].iloc[0]) if best is None else best
        cell = group.loc[group["temperature"] == at]
        at_best = finished.loc[finished["temperature"] == at]
        yield (key if isinstance(key, tuple) else (key,)), best, cell, at_best, chosen


def variant_table(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """Along the swept keys: one row per method, one column per variant holding the best
    temperature's mean ``metric`` and that temperature (``"0.412 ± 0.010 (T=0.1)"``).
    Empty for a frame without several variants."""
    found = variants(frame)
    if not found:
        return pd.DataFrame()
    best = best_temperature_table(frame, metric)
    if best.empty:
        return pd.DataFrame()
    where = best["best T"].map(lambda value: value if value == TEMPERATURE_FREE else f"T={value}")
    best["cell"] = best[metric] + " (" + where + ")"
    wide = best.pivot(index="method", columns="variant", values="cell")
    methods = list(pd.unique(frame["method"]))
    wide = wide.reindex(index=[m for m in methods if m in wide.index], columns=found)
    return wide.fillna("—").reset_index().rename_axis(columns=None)


def temperature_independent(cell: pd.DataFrame) -> bool:
    """True when the fits of a cell do not depend on the temperature."""
    return bool(temperature_free(cell).all())


def temperature_free(frame: pd.DataFrame) -> pd.Series:
    """Which rows are temperature-free fits (MAP, ensembles): ``temperature_shared`` where
    the frame has it, so that a per-temperature fit at T = 0 (VI) is not one; else, for
    results logged before that column, a temperature of 0."""
    if "temperature_shared" in frame.columns:
        return frame["temperature_shared"].fillna(False).astype(bool)
    return pd.to_numeric(frame["temperature"], errors="coerce") <= 0


def _marked(text: str, rows: pd.DataFrame, columns: list[str]) -> str:
    """``text`` followed by :data:`MARK` when one of ``rows`` has a flag on ``columns``."""
    return f"{text} {MARK}" if columns and flagged_rows(rows, columns).any() else text


def _in_order(table: pd.DataFrame, frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Sort by the frame's order of first appearance of variants and methods, then by
    rising temperature."""
    orders = {key: {v: i for i, v in enumerate(pd.unique(frame[key]))} for key in keys if key != "temperature"}
    return table.sort_values(
        keys, key=lambda column: column.map(orders[column.name]) if column.name in orders else column,
        kind="stable",
    )


def mean_and_spread(values: pd.Series, empty: str = "failed") -> str:
    """``mean ± sd`` (ddof 1) of the finite numbers in ``values`` to 3 decimals, the one
    value alone, or ``empty`` when there is none."""
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    numbers = numbers[np.isfinite(numbers)]
    if numbers.empty:
        return empty
    if len(numbers) == 1:
        return f"{numbers.iloc[0]:.3f}"
    return f"{numbers.mean():.3f} ± {numbers.std(ddof=1):.3f}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
