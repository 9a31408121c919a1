"""Multiple-choice questions in a report (``templates/bayesian_lora.py``): the table of
Laplace-LoRA's Table 1 (method × accuracy, ECE, NLL, mean ± standard deviation over
seeds, one block per temperature) for the test questions and for each shift set, and the
reliability diagram of the per-question predictive probabilities.

The sets are named as the evaluate stage logs them (:mod:`bayesflow.evaluate.shift`): the
test questions' metrics are ``test_<metric>``, a shift set ``<name>``'s are
``shift_<metric>_<name>``; the per-question arrays in ``evaluation.npz`` are
``probabilities`` and ``labels``, and ``shift_<name>_probabilities`` and
``shift_<name>_labels``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bayesflow.report.tables import mean_and_spread, temperature_free

__all__ = ["SHARED", "TABLE_COLUMNS", "TEST_SET", "auroc_table", "choice_table", "reliability_diagram", "reliability_frame",
           "set_metric", "shift_sets"]

# The name of the in-distribution test questions among the sets.
TEST_SET = "test"
# The columns of Laplace-LoRA's Table 1: metric → column title.
TABLE_COLUMNS = {"accuracy": "accuracy", "ece": "ECE", "nll": "NLL"}
# The temperature shown for fits that do not depend on it (MAP, ensembles).
SHARED = "shared"


def set_metric(metric: str, set_name: str) -> str:
    """The logged column of ``metric`` on the set: ``test_nll``, ``shift_nll_<name>``."""
    return f"test_{metric}" if set_name == TEST_SET else f"shift_{metric}_{set_name}"


def shift_sets(frame: pd.DataFrame) -> list[str]:
    """The shift sets the frame's fits logged, in the order of their columns."""
    prefix = "shift_accuracy_"
    return [column[len(prefix):] for column in frame.columns if column.startswith(prefix)]


def _temperature_label(frame: pd.DataFrame) -> pd.Series:
    shared = temperature_free(frame)
    values = pd.to_numeric(frame["temperature"], errors="coerce")
    return pd.Series([SHARED if free else f"{value:g}" for free, value in zip(shared, values)], index=frame.index)


def choice_table(frame: pd.DataFrame, set_name: str = TEST_SET, order: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (temperature, method), methods in ``order`` first: accuracy, ECE and
    NLL on the set, the mean over seeds ± the standard deviation when there are several
    ("—" where no fit finished with the metric). The temperature is the column ``T``
    (text: temperature-free fits come first, as ``shared``)."""
    columns = {set_metric(metric, set_name): title for metric, title in TABLE_COLUMNS.items()}
    present = [column for column in columns if column in frame.columns]
    if not present:
        return pd.DataFrame(columns=["T", "method", *columns.values()])
    rows = frame.assign(_temperature=_temperature_label(frame))
    temperatures = sorted(pd.unique(rows["_temperature"]), key=lambda t: -1.0 if t == SHARED else float(t))
    methods = [m for m in order if m in set(rows["method"])] + sorted(set(rows["method"]) - set(order))
    table = []
    for temperature in temperatures:
        for method in methods:
            cell = rows[(rows["_temperature"] == temperature) & (rows["method"] == method)]
            if cell.empty:
                continue
            values = [_mean_sd(pd.to_numeric(cell[column], errors="coerce")) if column in cell else "—"
                      for column in columns]
            table.append([temperature, method, *values])
    return pd.DataFrame(table, columns=["T", "method", *columns.values()])


def auroc_table(frame: pd.DataFrame, set_name: str, order: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (temperature, method): the AUROC of TU and of EU telling the shift set's
    questions from the test questions, mean over seeds ± standard deviation."""
    columns = {f"shift_auroc_total_{set_name}": "AUROC of TU", f"shift_auroc_epistemic_{set_name}": "AUROC of EU"}
    present = [column for column in columns if column in frame.columns]
    if not present:
        return pd.DataFrame(columns=["T", "method", *columns.values()])
    rows = frame.assign(_temperature=_temperature_label(frame))
    table = []
    for (temperature, method), cell in rows.groupby(["_temperature", "method"], sort=False):
        table.append([temperature, method, *(_mean_sd(pd.to_numeric(cell[column], errors="coerce"))
                                             for column in present)])
    result = pd.DataFrame(table, columns=["T", "method", *(columns[column] for column in present)])
    rank = {method: index for index, method in enumerate(order)}
    keys = result["method"].map(lambda method: rank.get(method, len(rank)))
    return result.assign(_rank=keys).sort_values(["_rank", "method"], kind="stable").drop(columns="_rank") \
        .reset_index(drop=True)


def _mean_sd(values: pd.Series) -> str:
    return mean_and_spread(values, empty="—")


def reliability_frame(
    frame: pd.DataFrame, evaluations: Mapping[str, Mapping[str, Any]], key: str = "cell"
) -> pd.DataFrame:
    """One row per (fit, set, question): ``method``, ``temperature`` (``shared`` for a
    temperature-free fit), ``seed``, ``set`` (``test`` or a shift set's name),
    ``confidence`` (the predictive's largest probability) and ``correct`` (its choice is
    the answer); fits without per-question arrays are left out."""
    pieces = []
    labels = _temperature_label(frame)
    for index, row in frame.iterrows():
        arrays = evaluations.get(row[key])
        if arrays is None or "probabilities" not in arrays or "labels" not in arrays:
            continue
        sets = [(TEST_SET, "")] + [(name, f"shift_{name}_") for name in _array_sets(arrays)]
        for set_name, prefix in sets:
            probabilities = np.asarray(arrays[f"{prefix}probabilities"], dtype=float)
            answers = np.asarray(arrays[f"{prefix}labels"])
            pieces.append(pd.DataFrame({
                "method": row["method"], "temperature": labels[index], "seed": row["seed"], "set": set_name,
                "confidence": probabilities.max(axis=-1), "correct": probabilities.argmax(axis=-1) == answers,
            }))
    columns = ["method", "temperature", "seed", "set", "confidence", "correct"]
    return pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=columns)


def _array_sets(arrays: Mapping[str, Any]) -> list[str]:
    """The shift sets of one fit's arrays."""
    return [name[len("shift_"):-len("_probabilities")] for name in arrays
            if name.startswith("shift_") and name.endswith("_probabilities")]


def reliability_diagram(
    long: pd.DataFrame, temperature: str, bins: int = 10, order: Sequence[str] = ()
) -> Figure:
    """Accuracy against confidence in ``bins`` equal-width bins (right-closed, as the ECE's),
    one panel per set, one line per method at ``temperature`` (temperature-free fits
    always drawn), seeds pooled; the diagonal is perfect calibration and each point's
    size its share of the questions."""
    chosen = long[(long["temperature"] == temperature) | (long["temperature"] == SHARED)]
    sets = list(pd.unique(chosen["set"]))
    present = list(pd.unique(chosen["method"]))
    methods = [m for m in order if m in present] + [m for m in present if m not in order]
    figure, axes = plt.subplots(1, max(len(sets), 1), figsize=(4.2 * max(len(sets), 1), 4), squeeze=False)
    edges = np.linspace(0.0, 1.0, bins + 1)
    for axis, set_name in zip(axes[0], sets):
        axis.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1)
        for method in methods:
            rows = chosen[(chosen["set"] == set_name) & (chosen["method"] == method)]
            where = np.clip(np.searchsorted(edges, rows["confidence"].to_numpy(), side="left") - 1, 0, bins - 1)
            grouped = pd.DataFrame({"bin": where, "confidence": rows["confidence"].to_numpy(),
                                    "correct": rows["correct"].to_numpy(dtype=float)}).groupby("bin")
            summary = grouped.agg(confidence=("confidence", "mean"), accuracy=("correct", "mean"),
                                  count=("correct", "size"))
            (line,) = axis.plot(summary["confidence"], summary["accuracy"], label=method)
            axis.scatter(summary["confidence"], summary["accuracy"], color=line.get_color(),
                         s=200 * summary["count"] / max(len(rows), 1))
        axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (largest predictive probability)",
                 ylabel="accuracy", title=set_name)
    if sets:
        axes[0][0].legend(title="method", fontsize="small")
    figure.suptitle(f"Reliability at T = {temperature}")
    figure.tight_layout()
    return figure
