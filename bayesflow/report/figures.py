"""Seaborn figures and tables over a results frame, one look for every report.

A results frame has one row per fit with the columns ``method``, ``engine``,
``temperature`` (float), ``temperature_shared``, ``seed`` (int), ``status``, the summary
metrics ``test_nll``, ``test_accuracy``, ``test_ece``, ``test_brier``, ``fit_seconds``,
``steps``, and ``cell`` (a report bundle's, :mod:`bayesflow.report.bundle`) or ``run_id``
(:func:`bayesflow.results`).

Fits that do not depend on the temperature (a MAP, an ensemble: the T → 0 limit) are
logged with temperature 0, which a log axis cannot show; they are drawn as horizontal
reference lines. Functions here draw on an ``Axes`` and return it; they never call
``plt.show()`` (the notebook's inline backend displays figures).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from bayesflow.errors import RegistryError

__all__ = [
    "METRIC_LABELS",
    "PLOT_METRICS",
    "apply_theme",
    "failed_cells",
    "metric_vs_temperature",
    "plot",
    "results_table",
]

METRIC_LABELS: dict[str, str] = {
    "test_nll": "test NLL (mean per point, lower is better)",
    "test_accuracy": "test accuracy (higher is better)",
    "test_ece": "test ECE (expected calibration error, lower is better)",
    "test_brier": "test Brier score (mean per point, lower is better)",
    "fit_seconds": "fit time (seconds)",
    "steps": "update steps",
}
"""Axis label of each metric: what it is and which way is better."""

PLOT_METRICS: dict[str, str] = {
    "nll_vs_temperature": "test_nll",
    "accuracy_vs_temperature": "test_accuracy",
    "ece_vs_temperature": "test_ece",
    "brier_vs_temperature": "test_brier",
}
"""Plot names a workflow spec may list, and the metric each draws."""

TABLE_METRICS = ("test_nll", "test_accuracy", "test_ece", "test_brier")
FINISHED = "FINISHED"  # MLflow's status of a run that ended without error


def apply_theme() -> None:
    """Set the one seaborn theme every report uses."""
    sns.set_theme(style="whitegrid", context="notebook")


def plot(name: str, frame: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Draw the plot a workflow spec names, e.g. ``"nll_vs_temperature"``.

    Raises:
        RegistryError: the name is not in :data:`PLOT_METRICS`.
    """
    if name not in PLOT_METRICS:
        raise RegistryError(f"unknown plot {name!r}; expected one of {sorted(PLOT_METRICS)}")
    return metric_vs_temperature(frame, PLOT_METRICS[name], ax=ax)


def failed_cells(frame: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Return the rows that did not finish or whose ``metric`` is missing.

    Args:
        frame: a results frame.
        metric: also count a finished run without a finite value of this metric as
            failed; None looks at the status only.
    """
    failed = frame["status"].astype(str) != FINISHED
    if metric is not None:
        failed |= ~np.isfinite(pd.to_numeric(frame[metric], errors="coerce"))
    return frame.loc[failed]


def metric_vs_temperature(
    frame: pd.DataFrame,
    metric: str,
    ax: Axes | None = None,
) -> Axes:
    """Plot a metric against the posterior temperature, one line per method.

    Sampled methods are drawn as mean ± 1 sd over seeds on a log temperature axis.
    Fits shared by every temperature (``temperature_shared``, logged at temperature 0:
    T → 0 is optimisation) are drawn as dashed horizontal lines at their mean over seeds
    with a ±1 sd band. Failed fits (status not ``FINISHED``
    or a missing metric) are marked with an ``x`` at the bottom of the axis and
    listed in a note.

    Args:
        frame: a results frame (see the module docstring).
        metric: the column to plot, e.g. ``"test_nll"``.
        ax: the axes to draw on; a new figure when None.

    Returns:
        The axes drawn on.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    if metric not in frame.columns:  # no fit finished with it: every cell is marked failed
        frame = frame.assign(**{metric: np.nan})
    frame = frame.assign(
        temperature=pd.to_numeric(frame["temperature"], errors="coerce"),
        **{metric: pd.to_numeric(frame[metric], errors="coerce")},
    )
    palette = _palette(frame["method"])
    is_reference = frame["temperature"] <= 0
    if "temperature_shared" in frame.columns:
        is_reference |= frame["temperature_shared"].astype(bool)
    failed = failed_cells(frame, metric)
    succeeded = frame.drop(index=failed.index)

    _draw_sampled(ax, succeeded.loc[~is_reference], metric, palette)
    _draw_references(ax, succeeded.loc[is_reference], metric, palette)
    _format_temperature_axis(ax, frame.loc[~is_reference, "temperature"])
    _mark_failed(ax, failed, palette, is_reference.loc[failed.index])

    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{metric} against temperature")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small", frameon=True)
    return ax


def results_table(frame: pd.DataFrame, metrics: Iterable[str] = TABLE_METRICS) -> pd.DataFrame:
    """Summarise each metric as ``"mean ± sd"`` over seeds per method and temperature.

    Args:
        frame: a results frame.
        metrics: the metric columns to summarise.

    Returns:
        One row per (method, temperature) in order of first appearance and rising
        temperature, with ``method``, ``temperature``, ``finished`` ("finished/total"
        fits) and one formatted string column per metric. Failed fits are left out
        of the mean; a cell with no finished fit reads ``"failed"``.
    """
    metrics = [metric for metric in metrics if metric in frame.columns]
    method_order = {method: index for index, method in enumerate(pd.unique(frame["method"]))}
    rows = []
    for (method, temperature), group in frame.groupby(["method", "temperature"], sort=False):
        finished = group.loc[group["status"].astype(str) == FINISHED]
        row = {
            "method": method,
            "temperature": float(temperature),
            "finished": f"{len(finished)}/{len(group)}",
        }
        for metric in metrics:
            row[metric] = _mean_and_spread(finished[metric])
        rows.append(row)
    table = pd.DataFrame(rows, columns=["method", "temperature", "finished", *metrics])
    table = table.sort_values(
        ["method", "temperature"],
        key=lambda column: column.map(method_order) if column.name == "method" else column,
    )
    return table.reset_index(drop=True)


def _mean_and_spread(values: pd.Series) -> str:
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    numbers = numbers[np.isfinite(numbers)]
    if numbers.empty:
        return "failed"
    if len(numbers) == 1:
        return f"{numbers.iloc[0]:.3f}"
    return f"{numbers.mean():.3f} ± {numbers.std(ddof=1):.3f}"


def _display_name(method: str) -> str:
    """How figures name a method: a method named after its engine takes the engine's
    label (``map`` → ``MAP``, from the method registry); others keep their names."""
    from bayesflow.methods.registry import METHODS

    return METHODS.get(method).display_name if method in METHODS else method


def _palette(methods: pd.Series) -> dict[str, tuple[float, float, float]]:
    """One colour per method, stable within a figure and across figures of a frame."""
    names = list(pd.unique(methods))
    colours = sns.color_palette(n_colors=max(len(names), 1))
    return dict(zip(names, colours))


def _draw_sampled(ax: Axes, frame: pd.DataFrame, metric: str, palette: dict) -> None:
    for method, group in frame.groupby("method", sort=False):
        sns.lineplot(
            data=group,
            x="temperature",
            y=metric,
            errorbar="sd",
            marker="o",
            color=palette[method],
            label=_display_name(method),
            ax=ax,
        )
        ax.lines[-1].set_gid(f"method:{method}")


def _draw_references(ax: Axes, frame: pd.DataFrame, metric: str, palette: dict) -> None:
    for method, group in frame.groupby("method", sort=False):
        mean = group[metric].mean()
        spread = group[metric].std(ddof=1) if len(group) > 1 else math.nan
        line = ax.axhline(
            mean,
            linestyle="--",
            linewidth=1.5,
            color=palette[method],
            label=f"{_display_name(method)} (T → 0)",
        )
        line.set_gid(f"reference:{method}")
        if math.isfinite(spread):
            ax.axhspan(mean - spread, mean + spread, color=palette[method], alpha=0.12, lw=0)


def _format_temperature_axis(ax: Axes, temperatures: pd.Series) -> None:
    """Log-scale the x axis with a tick at each temperature of the grid."""
    positive = sorted(t for t in pd.unique(temperatures.dropna()) if t > 0)
    ax.set_xscale("log")
    if positive:
        ax.xaxis.set_major_locator(FixedLocator(positive))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        low, high = positive[0], positive[-1]
        ax.set_xlim(low / 1.5, high * 1.5)
        if low <= 1 <= high:
            # T = 1 is the Bayes posterior: the line the cold posterior effect is read against.
            ax.axvline(1.0, color="0.5", linestyle=":", linewidth=1)
    else:
        ax.set_xlim(0.1, 10)
    ax.set_xlabel("temperature T (log scale; T = 1 is the Bayes posterior)")


def _mark_failed(ax: Axes, failed: pd.DataFrame, palette: dict, is_reference: pd.Series) -> None:
    """Put an ``x`` at the bottom of the axis for each failed fit, and list them."""
    if failed.empty:
        return
    on_axis = failed.loc[~is_reference & (failed["temperature"] > 0)]
    if not on_axis.empty:
        ax.scatter(
            on_axis["temperature"],
            np.full(len(on_axis), 0.03),
            marker="x",
            s=60,
            linewidths=2,
            c=[palette[method] for method in on_axis["method"]],
            transform=ax.get_xaxis_transform(),  # x in data, y in axes coordinates
            clip_on=False,
            zorder=5,
            label="failed fit",
            gid="failed",
        )
    descriptions = [
        f"{_display_name(row.method)} T={row.temperature:g} seed {row.seed}"
        for row in failed.itertuples()
    ]
    shown = descriptions[:4]
    if len(descriptions) > len(shown):
        shown.append(f"and {len(descriptions) - len(shown)} more")
    ax.text(
        0.01,
        -0.22,
        "failed: " + "; ".join(shown),
        transform=ax.transAxes,
        fontsize="x-small",
        color="firebrick",
        va="top",
        gid="failed-note",
    )
