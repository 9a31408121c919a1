"""Figures and tables over a results frame, one look for every report.

The metric-against-temperature figures (the plot stages' PNGs and the report's) are drawn
with matplotlib in seaborn's look (:data:`THEME`, :data:`DEEP`), so a plot stage does not
import seaborn; the report templates use seaborn itself for their other figures.

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
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from bayesflow.errors import RegistryError
from bayesflow.report.tables import (  # results_table and TABLE_METRICS: also read from here
    FINISHED,
    MARK,
    TABLE_METRICS,
    failed_cells,
    flagged_rows,
    results_table,
    temperature_free,
    variants,
)

__all__ = [
    "FINISHED",
    "METRIC_LABELS",
    "PLOT_METRICS",
    "TABLE_METRICS",
    "apply_theme",
    "drawable_plots",
    "failed_cells",
    "metric_label",
    "metric_vs_temperature",
    "plot",
    "plot_metric",
    "results_table",
]

METRIC_LABELS: dict[str, str] = {
    "test_nll": "test NLL (mean per point, lower is better)",
    "test_accuracy": "test accuracy (higher is better)",
    "test_ece": "test ECE (expected calibration error, lower is better)",
    "test_brier": "test Brier score (mean per point, lower is better)",
    "test_rmse": "test RMSE of the predictive mean (lower is better)",
    "test_perplexity": "test perplexity per scored token (lower is better)",
    "fit_seconds": "fit time (seconds)",
    "steps": "update steps",
}
"""Axis label of each metric: what it is and which way is better."""

PLOT_METRICS: dict[str, str] = {
    "nll_vs_temperature": "test_nll",
    "accuracy_vs_temperature": "test_accuracy",
    "ece_vs_temperature": "test_ece",
    "brier_vs_temperature": "test_brier",
    "rmse_vs_temperature": "test_rmse",
    "coverage_vs_temperature": "test_coverage_90",
}
"""Plot names a workflow spec may list, and the metric each draws (coverage: of the 90%
central interval, or of the logged level nearest to it)."""

LOG_SPAN = 10.0
"""A metric whose positive values span at least this factor is drawn on a log axis."""
LINE_STYLES = ("-", "--", ":", "-.")  # one per sweep variant
LEGEND_WIDTH = 3.0  # inches a lone plot's figure grows by to hold a legend beside it
PAGE_FIGURE = (10.0, 4.5)
"""Inches of a report's metric figure before its legend: with the legend beside it (13
inches in all) it fills a report page's width (the page's style scales every image to
the content's width, :data:`bayesflow.report.offline.PAGE_STYLE`)."""


DEEP = (
    "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3",
    "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd",
)
"""Seaborn's ``deep`` palette (its default), the colours of the methods."""

THEME: dict[str, Any] = {
    "axes.axisbelow": True, "axes.edgecolor": ".8", "axes.grid": True, "axes.labelcolor": ".15",
    "axes.labelsize": 12.0, "axes.linewidth": 1.25, "axes.titlesize": 12.0,
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "font.size": 12.0, "grid.color": ".8", "grid.linewidth": 1.0, "legend.fontsize": 11.0,
    "legend.title_fontsize": 12.0, "lines.solid_capstyle": "round", "patch.edgecolor": "w",
    "patch.force_edgecolor": True, "text.color": ".15", "xtick.bottom": False, "xtick.color": ".15",
    "xtick.labelsize": 11.0, "xtick.major.size": 6.0, "xtick.major.width": 1.25,
    "xtick.minor.size": 4.0, "xtick.minor.width": 1.0, "ytick.color": ".15", "ytick.labelsize": 11.0,
    "ytick.left": False, "ytick.major.size": 6.0, "ytick.major.width": 1.25, "ytick.minor.size": 4.0,
    "ytick.minor.width": 1.0,
}
"""What ``seaborn.set_theme(style="whitegrid", context="notebook")`` sets (seaborn 0.13), set
without importing seaborn: its import (scipy.stats with it) took ~0.6 s of each run."""


def apply_theme() -> None:
    """Set the one theme every figure and report uses (:data:`THEME`, :data:`DEEP`)."""
    from cycler import cycler
    from matplotlib import style

    # 100 dpi: a notebook's inline figures are drawn at 72 (matplotlib-inline's default),
    # too few pixels for a page-wide figure (PAGE_FIGURE plus its legend: 1,300 px).
    style.use({**THEME, "axes.prop_cycle": cycler(color=list(DEEP)), "figure.dpi": 100})


def plot(name: str, frame: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Draw the plot a workflow spec names, e.g. ``"nll_vs_temperature"``.

    Raises:
        RegistryError: the name is not in :data:`PLOT_METRICS`.
    """
    if name not in PLOT_METRICS:
        raise RegistryError(f"unknown plot {name!r}; expected one of {sorted(PLOT_METRICS)}")
    metric = plot_metric(name, frame)
    ax = metric_vs_temperature(frame, metric, ax=ax)
    if metric.startswith("test_coverage_"):
        level = _coverage_level(metric)
        ax.axhline(level, color="black", linestyle=":", linewidth=1, gid="nominal")
    return ax


def drawable_plots(frame: pd.DataFrame, plots: list[str] | None = None) -> list[str]:
    """The plots of ``plots`` whose metric some fit of ``frame`` logged; given None, the
    task's defaults read from the frame: NLL with accuracy (classification) or with RMSE
    and coverage (regression). A template that draws these never meets a missing column."""
    wanted = plots if plots is not None else [
        "nll_vs_temperature", "accuracy_vs_temperature", "rmse_vs_temperature",
        "coverage_vs_temperature",
    ]
    present = [name for name in wanted if name in PLOT_METRICS and plot_metric(name, frame) in frame]
    return [
        name for name in present
        if pd.to_numeric(frame[plot_metric(name, frame)], errors="coerce").notna().any()
    ]


def plot_metric(name: str, frame: pd.DataFrame) -> str:
    """The column a plot draws from ``frame``: :data:`PLOT_METRICS`'s, except that the
    coverage plot takes the logged interval level nearest to 90%."""
    metric = PLOT_METRICS[name]
    if metric.startswith("test_coverage_") and metric not in frame.columns:
        logged = [c for c in frame.columns if str(c).startswith("test_coverage_") and _coverage_level(c) > 0]
        if logged:
            metric = min(logged, key=lambda c: abs(_coverage_level(c) - 0.9))
    return metric


def metric_label(metric: str) -> str:
    """The axis label of a metric: what it is and which way is better."""
    if metric.startswith("test_coverage_"):
        return f"coverage of the {_coverage_level(metric):.0%} predictive interval (nominal is best)"
    return METRIC_LABELS.get(metric, metric)


def _coverage_level(metric: str) -> float:
    """0.9 for ``test_coverage_90``; 0 when the name holds no level."""
    try:
        return float(metric.rsplit("_", 1)[1]) / 100
    except ValueError:
        return 0.0


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
    listed in a note. Fits that carry a flag (a ``flag/<column>`` message, see
    :mod:`bayesflow.report.tables`) are circled in red. When the positive values span
    a factor of :data:`LOG_SPAN` or more, the y axis is logarithmic and its label says
    so. For a sweep (several ``variant`` values), each variant has its own line style.

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
    styles = {variant: LINE_STYLES[i % len(LINE_STYLES)] for i, variant in enumerate(variants(frame))}
    palette = _palette(frame["method"])
    is_reference = temperature_free(frame)
    failed = failed_cells(frame, metric)
    succeeded = frame.drop(index=failed.index)

    for variant, part in _by_variant(succeeded, styles):
        inside = is_reference.loc[part.index]
        sampled_style, reference_style = (styles[variant],) * 2 if variant is not None else ("-", "--")
        _draw_sampled(ax, part.loc[~inside], metric, palette, variant, sampled_style)
        _draw_references(ax, part.loc[inside], metric, palette, variant, reference_style)
    _format_temperature_axis(ax, frame.loc[~is_reference, "temperature"])
    _mark_flagged(ax, succeeded, metric, is_reference.loc[succeeded.index])
    _mark_failed(ax, failed, palette, is_reference.loc[failed.index])

    label = metric_label(metric)
    if _spans_decades(succeeded[metric]):
        ax.set_yscale("log")
        # Plain numbers (0.3, not 3×10⁻¹): every decade, and 2, 3 and 5 times it.
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(_minor_label))
        label += "\n(log scale)"
    ax.set_ylabel(label)
    ax.set_title(f"{metric} against temperature")
    if ax.get_legend_handles_labels()[0]:  # beside the axes, where it hides no line
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
        figure = ax.figure
        if isinstance(figure, Figure) and len(figure.axes) == 1:  # this plot alone: widen it
            width, height = figure.get_size_inches()
            figure.set_size_inches(width + LEGEND_WIDTH, height)
            figure.tight_layout()
    return ax


def _minor_label(value: float, _: object) -> str:
    """A log axis' minor tick label: 2, 3 and 5 times a power of ten, others unlabelled."""
    if value <= 0:
        return ""
    leading = round(value / 10 ** math.floor(math.log10(value)), 6)
    return f"{value:g}" if leading in (2.0, 3.0, 5.0) else ""


def _spans_decades(values: pd.Series) -> bool:
    """True when every finite value is positive and the largest is at least
    :data:`LOG_SPAN` times the smallest."""
    finite = values[np.isfinite(values)]
    return bool(len(finite) > 1 and (finite > 0).all() and finite.max() >= LOG_SPAN * finite.min())


def _by_variant(frame: pd.DataFrame, styles: dict[str, str]) -> list[tuple[str | None, pd.DataFrame]]:
    """The frame split by sweep variant, or whole (variant None) for a plain study."""
    if not styles:
        return [(None, frame)]
    return [(variant, frame.loc[frame["variant"].astype(str) == variant]) for variant in styles]


def _label(method: str, variant: str | None) -> str:
    return _display_name(method) + (f" [{variant}]" if variant is not None else "")


def _display_name(method: str) -> str:
    """How figures name a method: a method named after its engine takes the engine's
    label (``map`` → ``MAP``, from the method registry); others keep their names."""
    from bayesflow.methods.registry import METHODS

    return METHODS.get(method).display_name if method in METHODS else method


def _palette(methods: pd.Series) -> dict[str, tuple[float, float, float]]:
    """One colour per method, stable within a figure and across figures of a frame."""
    from matplotlib.colors import to_rgb

    names = list(pd.unique(methods))
    return {name: to_rgb(DEEP[index % len(DEEP)]) for index, name in enumerate(names)}


def _draw_sampled(
    ax: Axes, frame: pd.DataFrame, metric: str, palette: dict, variant: str | None, style: str
) -> None:
    """Per method, the mean over seeds at each temperature with a ±1 sd band (sample sd;
    none where one seed finished), as seaborn's ``lineplot(errorbar="sd")`` draws it."""
    for method, group in frame.groupby("method", sort=False):
        stats = group[["temperature", metric]].dropna().groupby("temperature")[metric]
        summary = stats.agg(["mean", "std"]).sort_index()
        x = summary.index.to_numpy(dtype=float)
        mean, spread = summary["mean"].to_numpy(dtype=float), summary["std"].to_numpy(dtype=float)
        colour = palette[method]
        (line,) = ax.plot(
            x, mean, marker="o", linestyle=style, color=colour, label=_label(method, variant),
            markeredgecolor="w", markeredgewidth=0.75,
        )
        line.set_gid(f"method:{method}" + (f":{variant}" if variant is not None else ""))
        banded = np.isfinite(spread)
        if banded.any():
            ax.fill_between(
                x[banded], (mean - spread)[banded], (mean + spread)[banded], color=colour,
                alpha=0.2, linewidth=0,
            )


def _draw_references(
    ax: Axes, frame: pd.DataFrame, metric: str, palette: dict, variant: str | None, style: str
) -> None:
    for method, group in frame.groupby("method", sort=False):
        mean = group[metric].mean()
        spread = group[metric].std(ddof=1) if len(group) > 1 else math.nan
        line = ax.axhline(
            mean,
            linestyle=style,
            linewidth=1.5,
            color=palette[method],
            label=f"{_label(method, variant)} (T → 0)",
        )
        line.set_gid(f"reference:{method}" + (f":{variant}" if variant is not None else ""))
        if math.isfinite(spread):
            ax.axhspan(mean - spread, mean + spread, color=palette[method], alpha=0.12, lw=0)


def _mark_flagged(ax: Axes, frame: pd.DataFrame, metric: str, is_reference: pd.Series) -> None:
    """Circle in red each point of a mean line (method, variant and temperature) that a
    flagged fit concerns: on the line, at the mean over seeds it is drawn at (not at the
    fit's own value, which is off the line); a temperature-free fit's horizontal line
    at the left edge of the axis."""
    flagged = flagged_rows(frame)
    if not flagged.any():
        return
    keys = [key for key in ("variant", "method", "temperature") if key in frame.columns]
    means = frame.groupby(keys, dropna=False, sort=False)[metric].transform("mean")
    points = frame.assign(mean=means).loc[flagged].drop_duplicates(keys)
    sampled = points.loc[~is_reference.loc[points.index] & (points["temperature"] > 0)]
    common: dict = {"s": 110, "facecolors": "none", "edgecolors": "red", "linewidths": 1.6, "zorder": 6}
    label = f"{MARK} flagged fit (the flags table says why)"
    if not sampled.empty:
        ax.scatter(sampled["temperature"], sampled["mean"], label=label, gid="flagged", **common)
        label = "_nolegend_"
    shared = points.drop(index=sampled.index)
    if not shared.empty:
        ax.scatter(np.full(len(shared), 0.02), shared["mean"], transform=ax.get_yaxis_transform(),
                   clip_on=False, label=label, gid="flagged-shared", **common)


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
