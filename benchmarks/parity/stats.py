"""Seed spread, paired gaps and the targets of the peer-parity benchmark, and its table.

Both tools are fitted from the same seeds (the same starts and minibatch orders), so a
cell's gap is a **paired** difference: ``gap_s = bayesflow_s − posteriors_s`` per seed s,
its mean ± standard error ``sd(gap) / √n``, a paired t statistic with n − 1 degrees of
freedom and the 95% interval ``mean ± t₀.₉₇₅ · SE``. The target (issue 14) is
``|gap| ≤ 0.03`` test NLL and ``≤ 1.5`` accuracy points; a cell is

- ``within`` when the mean gap is inside the target,
- ``outside`` when it is not but the 95% interval still reaches into the target (more
  seeds could tell),
- ``significantly outside`` when the whole interval lies beyond the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["METRICS", "TARGETS", "absent", "describe", "number", "paired_gap", "status", "table"]

METRICS = ("test_nll", "test_accuracy")
# Issue 14: every cell within 0.03 NLL and 1.5 accuracy points of the peer.
TARGETS = {"test_nll": 0.03, "test_accuracy": 0.015}
LABELS = {
    "map": "MAP",
    "laplace_diag_ggn": "Laplace diag GGN",
    "vi_diag": "VI diag",
    "sghmc_serial": "serial SGHMC",
    "sghmc_parallel": "parallel SGHMC (10 chains)",
}


def describe(values: Sequence[float]) -> dict[str, Any]:
    """Mean, standard error (sd / √n), sd, min and max of one tool's values over seeds."""
    count = len(values)
    mean = sum(values) / count
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (count - 1)) if count > 1 else math.nan
    return {
        "n": count,
        "mean": mean,
        "standard_error": sd / math.sqrt(count) if count > 1 else math.nan,
        "sd": sd,
        "min": min(values),
        "max": max(values),
    }


def paired_gap(ours: Sequence[float], theirs: Sequence[float], target: float) -> dict[str, Any]:
    """The paired gap ``ours − theirs`` over seeds: mean, SE, t, p, 95% interval, status."""
    from scipy import stats

    gaps = [a - b for a, b in zip(ours, theirs, strict=True)]
    summary = describe(gaps)
    mean, error, count = summary["mean"], summary["standard_error"], summary["n"]
    if count < 2:
        t_value = p_value = math.nan
        low = high = mean
    elif error == 0:
        t_value = math.inf if mean else 0.0
        p_value = 0.0 if mean else 1.0
        low = high = mean
    else:
        t_value = mean / error
        p_value = float(2 * stats.t.sf(abs(t_value), count - 1))
        half = float(stats.t.ppf(0.975, count - 1)) * error
        low, high = mean - half, mean + half
    return {
        **summary,
        "t": t_value,
        "p_value": p_value,
        "ci95": [low, high],
        "target": target,
        "status": status(mean, low, high, target, count),
    }


def status(mean: float, low: float, high: float, target: float, count: int) -> str:
    """``within``, ``outside`` or ``significantly outside`` the target (module docstring)."""
    if abs(mean) <= target:
        return "within"
    if count >= 2 and (low > target or high < -target):
        return "significantly outside"
    return "outside"


def absent(value: float | None) -> bool:
    """Whether a statistic is missing: NaN here, None once read back from the JSON."""
    return value is None or math.isnan(value)


def number(summary: dict[str, Any], scale: float, digits: int) -> str:
    """``mean ± SE`` (just the mean for one seed)."""
    mean = f"{summary['mean'] * scale:.{digits}f}"
    error = summary["standard_error"]
    return mean if absent(error) else f"{mean} ± {error * scale:.{digits}f}"


def table(cells: list[dict[str, Any]]) -> str:
    """The markdown table: both tools' test NLL and accuracy (mean ± SE over seeds), the
    paired gap ± SE with its p value, and the status against the target."""
    header = (
        "| method | T | NLL bayesflow | NLL posteriors | NLL gap (p) | NLL | "
        "accuracy % bayesflow | accuracy % posteriors | accuracy gap, points (p) | accuracy |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = [header]
    for cell in cells:
        summary = cell["summary"]
        temperature = "any" if cell["temperature"] is None else f"{cell['temperature']:g}"
        parts = [LABELS.get(cell["method"], cell["method"]), temperature]
        for metric, scale, digits in (("test_nll", 1.0, 3), ("test_accuracy", 100.0, 1)):
            gap = summary["gap"][metric]
            p_value = "" if absent(gap["p_value"]) else f" ({gap['p_value']:.2g})"
            verdict = gap["status"]
            parts += [
                number(summary["bayesflow"][metric], scale, digits),
                number(summary["posteriors"][metric], scale, digits),
                number(gap, scale, digits + 1) + p_value,
                f"**{verdict}**" if verdict != "within" else verdict,
            ]
        rows.append("| " + " | ".join(parts) + " |")
    return "\n".join(rows)
