"""Comparing two or more runs of a workflow (``bayesflow report --compare A B``).

:func:`comparison_frame` stacks the runs' results frames with a ``run`` column;
:func:`metric_by_run` draws one metric against temperature with one line per (run,
method): a colour per method and a line style per run; :func:`difference_table`
tabulates each run's mean minus the first run's; :func:`spec_difference` shows how the
specs differ. Nothing here reads the store: the template passes the frames in.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes

from bayesflow.report.figures import _format_temperature_axis, metric_label
from bayesflow.report.tables import AGREEMENT_METRICS, FINISHED

__all__ = ["comparison_frame", "comparison_metrics", "difference_table", "metric_by_run",
           "spec_difference"]

LINE_STYLES = ("-", "--", ":", "-.")
SUMMARY_METRICS = ("test_nll", "test_accuracy", "test_ece", "test_brier", "test_rmse")


def comparison_frame(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The runs' results frames stacked, with a ``run`` column (the mapping's keys, in
    order) and only the finished fits."""
    stacked = pd.concat(
        [frame.assign(run=label) for label, frame in frames.items()], ignore_index=True
    )
    stacked["run"] = pd.Categorical(stacked["run"], list(frames))
    return stacked.loc[stacked["status"].astype(str) == FINISHED].reset_index(drop=True)


def comparison_metrics(frame: pd.DataFrame) -> list[str]:
    """The metrics worth comparing that the runs logged: the summary metrics, then
    ``ksd``, reference distances, agreement with the reference and OOD AUROCs, then
    ``fit_seconds``."""
    wanted = [*SUMMARY_METRICS, "ksd", "reference_mean_error", "reference_variance_error",
              *AGREEMENT_METRICS, "ood_auroc_total", "ood_auroc_epistemic", "fit_seconds"]
    return [metric for metric in wanted if metric in frame.columns and frame[metric].notna().any()]


def metric_by_run(frame: pd.DataFrame, metric: str, ax: Axes) -> Axes:
    """``metric`` against temperature: a colour per method, a line style per run;
    temperature-free fits (T → 0, logged at 0) as horizontal lines. Means over seeds."""
    runs = list(frame["run"].cat.categories)
    methods = list(pd.unique(frame["method"]))
    palette = dict(zip(methods, sns.color_palette(n_colors=max(len(methods), 1))))
    means = frame.groupby(["run", "method", "temperature"], observed=True)[metric].mean().reset_index()
    for (run, method), group in means.groupby(["run", "method"], observed=True, sort=False):
        style = LINE_STYLES[runs.index(run) % len(LINE_STYLES)]
        label = f"{method} [{run}]"
        sampled = group.loc[group["temperature"] > 0].sort_values("temperature")
        if not sampled.empty:
            ax.plot(sampled["temperature"], sampled[metric], linestyle=style, marker="o",
                    color=palette[method], label=label)
        for value in group.loc[group["temperature"] <= 0, metric]:
            ax.axhline(value, linestyle=style, color=palette[method], linewidth=1.2,
                       label=f"{label} (T → 0)")
    _format_temperature_axis(ax, frame["temperature"])
    ax.set_ylabel(metric_label(metric))
    ax.set_title(f"{metric} against temperature")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small", frameon=False)
    return ax


def difference_table(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Per method and temperature: each metric's mean over seeds in the first run and,
    for every later run, its mean minus the first run's (``Δ <metric> [run]``).
    A cell is NaN where a run lacks that method or temperature."""
    runs = list(frame["run"].cat.categories)
    means = frame.groupby(["method", "temperature", "run"], observed=True)[list(metrics)].mean()
    wide = means.unstack("run")
    table = pd.DataFrame(index=wide.index)
    for metric in metrics:
        first = wide.get((metric, runs[0]), np.nan)
        table[f"{metric} [{runs[0]}]"] = first
        for run in runs[1:]:
            later = wide.get((metric, run), np.nan)
            table[f"Δ {metric} [{run}]"] = later - first
    return table.reset_index()


def spec_difference(first: str, second: str, names: tuple[str, str] = ("a", "b")) -> str:
    """A unified diff of two resolved specs (YAML text); empty when they are equal."""
    lines = difflib.unified_diff(
        first.splitlines(), second.splitlines(), fromfile=names[0], tofile=names[1], lineterm="", n=1
    )
    return "\n".join(lines)
