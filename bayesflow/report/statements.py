"""The statements evaluation in a report (``evaluate.statements``; the posteriors paper's
Section 5.3): the per-statement arrays of every fit as one long frame, the paper's
Tables 1 (AUROC) and 2 (loss) in its layout, and the NLL of each statement on either set.

The uncertainty figures (Figures 7 and 10) are
:func:`bayesflow.report.experiments.uncertainty_distributions` of :func:`statements_frame`:
the frame has the columns that function reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from bayesflow.report.experiments import INPUTS

__all__ = ["set_order", "statement_nll", "statement_table", "statements_frame"]

# Each set's suffix in the arrays and metrics of bayesflow.stages.statements: "in", and
# "ood" for one unnamed OOD set, else each set's own name (shown as it is).
SUFFIXES = dict(zip(INPUTS, ("in", "ood")))


def _sets(arrays: Mapping[str, Any]) -> dict[str, str]:
    """``{label: suffix}`` of the statement sets in one fit's arrays, in-distribution first."""
    suffixes = [key[len("statements_tu_"):] for key in arrays if key.startswith("statements_tu_")]
    labels = {suffix: label for label, suffix in SUFFIXES.items()}
    ordered = ["in"] + [suffix for suffix in suffixes if suffix != "in"]
    return {labels.get(suffix, suffix): suffix for suffix in ordered}


def set_order(long: pd.DataFrame) -> list[str]:
    """The statement sets of a :func:`statements_frame` in their order (in-distribution first)."""
    return list(pd.unique(long["inputs"]))


def statements_frame(
    frame: pd.DataFrame, evaluations: Mapping[str, Mapping[str, Any]], key: str = "cell"
) -> pd.DataFrame:
    """One row per (fit, statement): ``method``, ``temperature``, ``seed``, ``key``'s
    column, ``inputs`` (``in-distribution``, ``out-of-distribution`` or an OOD set's
    name), ``statement`` (its index),
    ``total``, ``aleatoric``, ``epistemic`` and ``nll`` (nats); fits without the arrays
    are left out."""
    pieces = []
    for row in frame.to_dict("records"):
        arrays = evaluations.get(row[key])
        if arrays is None or "statements_tu_in" not in arrays:
            continue
        for inputs, suffix in _sets(arrays).items():
            values = {kind: np.asarray(arrays[f"statements_{name}_{suffix}"]) for kind, name in (
                ("total", "tu"), ("aleatoric", "au"), ("epistemic", "eu"), ("nll", "nll"))}
            pieces.append(pd.DataFrame({
                "method": row["method"], "temperature": row["temperature"], "seed": row["seed"],
                key: row[key], "inputs": inputs, "statement": np.arange(len(values["total"])), **values,
            }))
    columns = ["method", "temperature", "seed", key, "inputs", "statement", "total", "aleatoric",
               "epistemic", "nll"]
    return pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=columns)


def statement_table(frame: pd.DataFrame, metrics: Mapping[str, str], order: Sequence[str] = ()) -> pd.DataFrame:
    """One row per method (in ``order`` first): a ``method`` column, then one column per
    metric renamed by ``metrics`` (``{metric: column title}``): the mean over seeds, ± the
    standard deviation when there are several; methods without the metric are left out."""
    present = [metric for metric in metrics if metric in frame.columns]
    rows = frame.dropna(subset=present, how="all")
    methods = [m for m in order if m in set(rows["method"])] + sorted(set(rows["method"]) - set(order))
    table = {}
    for method in methods:
        values = rows.loc[rows["method"] == method, present]
        table[method] = [_mean_sd(values[metric]) for metric in present]
    frame = pd.DataFrame.from_dict(table, orient="index", columns=[metrics[m] for m in present])
    return frame.rename_axis("method").reset_index()  # a column: styled tables hide the index


def _mean_sd(values: pd.Series) -> str:
    finite = values.dropna()
    if finite.empty:
        return "—"
    if len(finite) == 1:
        return f"{finite.iloc[0]:.3f}"
    return f"{finite.mean():.3f} ± {finite.std(ddof=1):.3f}"


def statement_nll(long: pd.DataFrame, order: Sequence[str] = ()) -> Figure:
    """The last word's NLL of every statement, in- and out-of-distribution, one box per
    method and set (seeds pooled)."""
    present = list(pd.unique(long["method"]))
    methods = [m for m in order if m in present] + [m for m in present if m not in order]
    figure, axis = plt.subplots(figsize=(1.6 * max(len(methods), 2) + 2, 3.6))
    sns.boxplot(data=long, x="method", y="nll", hue="inputs", order=methods, hue_order=set_order(long),
                ax=axis, fliersize=2)
    axis.set_xlabel("")
    axis.set_ylabel("last word's NLL (nats)")
    figure.tight_layout()
    return figure
