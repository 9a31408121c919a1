"""A temperature between grid points, suggested by the validation NLL (a suggestion only).

The grid of a study is coarse (often a factor 5 or 10 between temperatures). Around each
method's best grid temperature, the mean validation NLL (minus the mean log predictive
density of the validation rows) at that temperature and its two neighbours fixes a
parabola in log T; its vertex is where that smooth curve is lowest:

    u = log T,  v(u) ≈ a + b (u − u*)²,  T* = exp(u*)

No fit was run at T*, so the report states it as a temperature to try, never as a result.
When the best grid temperature is the grid's first or last, the minimum may lie outside the
grid and nothing is suggested (a parabola there would extrapolate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from bayesflow.report.tables import FINISHED, selection_metric, variants

__all__ = ["suggested_temperature", "suggested_temperatures"]


def suggested_temperature(temperatures: Sequence[float], values: Sequence[float]) -> float | None:
    """The vertex, in log T, of the parabola through the lowest value and its neighbours.

    Args:
        temperatures: a grid of positive temperatures, rising.
        values: the mean validation NLL at each.

    Returns:
        T* within the two neighbours of the lowest value; None when the (first) lowest
        value is at an end of the grid or there are fewer than three temperatures.
    """
    u, v = np.log(np.asarray(temperatures, dtype=float)), np.asarray(values, dtype=float)
    best = int(np.argmin(v))
    if len(v) < 3 or best in (0, len(v) - 1):
        return None
    (u0, u1, u2), (v0, v1, v2) = u[best - 1 : best + 2], v[best - 1 : best + 2]
    # The vertex of the parabola through three points (divided differences).
    # v1 is the first lowest: v0 > v1 <= v2, so left < 0 <= right and the curvature is
    # positive, and the vertex lies between u0 and u2.
    left, right = (v1 - v0) / (u1 - u0), (v2 - v1) / (u2 - u1)
    curvature = (right - left) / (u2 - u0)
    vertex = (u0 + u1) / 2 - left / (2 * curvature)
    return math.exp(vertex)


def suggested_temperatures(frame: pd.DataFrame, metric: str = "test_nll") -> dict[tuple[str, ...], float | None]:
    """Per (variant,) method of a results frame with validation metrics (``val_nll`` for
    ``test_nll``), :func:`suggested_temperature` over its mean over finished seeds at each
    positive temperature; methods without validation metrics or without a temperature
    grid (temperature-shared fits, logged at T = 0) are left out."""
    validation = selection_metric(metric)
    if validation not in frame.columns:
        return {}
    keyed = ["variant"] if variants(frame) else []
    values = frame.assign(**{validation: pd.to_numeric(frame[validation], errors="coerce")})
    finished = values.loc[(values["status"].astype(str) == FINISHED) & (values["temperature"] > 0)]
    found: dict[tuple[str, ...], float | None] = {}
    for key, group in finished.groupby([*keyed, "method"], sort=False):
        means = group.groupby("temperature")[validation].mean().dropna().sort_index()
        if len(means) >= 2:
            found[tuple(map(str, key if isinstance(key, tuple) else (key,)))] = suggested_temperature(
                means.index.tolist(), means.tolist()
            )
    return found
