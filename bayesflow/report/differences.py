"""Which differences between methods are real across seeds: the tables and sentences of
the report's "Differences across seeds" section.

For a results frame and a metric (the report's headline metric, the test NLL), every pair
of methods is compared with :func:`bayesflow.evaluate.significance.compare`:

- :func:`pairs_by_temperature`: at each temperature T > 0, each pair of the methods fitted
  at T, and each of them against each method whose fit does not depend on T (MAP, deep
  ensembles: ``temperature_shared``); pairs of the latter once, at "T → 0";
- :func:`pairs_at_best`: each pair of methods at their own best temperatures, the cells
  :func:`bayesflow.report.tables.best_cells` picks.

A pair is tested paired by seed when both cells finished the same seeds (a seed fixes the
initial weights of every method and all are scored on one test split: see
:mod:`bayesflow.evaluate.significance`), by Welch's test otherwise. The p-values of one
table are one family, adjusted by Holm's method; a difference is significant when its
adjusted p-value is at most α = 0.05. Each row ends with a sentence saying what it means.
Nothing here draws or escapes: callers escape the text they put into Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from bayesflow.evaluate.significance import ALPHA, Comparison, compare, holm
from bayesflow.report.tables import FINISHED, best_cells, temperature_independent, variants
from bayesflow.temperature import TEMPERATURE_FREE

__all__ = ["COLUMNS", "explain", "pairs_at_best", "pairs_by_temperature", "section", "summary"]

COLUMNS = ("method A", "method B", "test", "seeds", "A − B", "p", "p (Holm)",
           "detectable", "significant", "reading")
"""The columns every table has, after its keys (``variant``, the temperatures)."""
SHARED = TEMPERATURE_FREE
UNIT = {"test_nll": "nats"}
NAMES = {"test_nll": "test NLL"}


def _values(rows: pd.DataFrame, metric: str) -> dict[int, float]:
    """seed → metric of the finished fits with a finite value."""
    finished = rows.loc[rows["status"].astype(str) == FINISHED] if "status" in rows else rows
    numbers = pd.to_numeric(finished[metric], errors="coerce")
    return {int(seed): float(value) for seed, value in zip(finished["seed"], numbers) if np.isfinite(value)}


def _number(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:.3g}"


def _signed(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:+.3g}"


def explain(first: str, second: str, result: Comparison, adjusted: float, metric: str = "test_nll") -> str:
    """One plain sentence: what the test of ``first`` − ``second`` says, with the minimum
    detectable difference for the seeds run."""
    unit = UNIT.get(metric, "")
    gap = f"{abs(result.difference):.3g}{' ' + unit if unit else ''}"
    if result.note in ("no seed", "one seed"):
        return f"{result.note}: no test across seeds is possible; run more seeds to compare {first} and {second}."
    if result.note == "tie":
        return f"{first} and {second} are equal at every seed: a tie."
    lower = f"{first if result.difference < 0 else second}'s {NAMES.get(metric, metric)}"
    if result.note == "no spread":
        return (f"{lower} is lower by {gap} at every one of {result.seeds} seeds, the same gap each "
                "time: no spread to test, the seeds do not change the difference.")
    floor = f"{result.detectable:.3g}{' ' + unit if unit else ''}"
    how = "paired" if result.test == "paired" else "unpaired, Welch"
    reach = f"with {result.seeds} seeds ({how}), only gaps above {floor} could be told apart"
    if adjusted <= ALPHA:
        return f"{lower} is lower by {gap}: significant (Holm p = {adjusted:.2g}); {reach}."
    return f"{reach}; {first} and {second} differ by {gap}: not significant."


def _row(first: str, second: str, result: Comparison, adjusted: float, metric: str) -> dict[str, Any]:
    tested = math.isfinite(adjusted)
    return {
        "method A": first, "method B": second, "test": result.test, "seeds": result.seeds,
        "A − B": _signed(result.difference), "p": _number(result.p_value), "p (Holm)": _number(adjusted),
        "detectable": _number(result.detectable),
        "significant": ("yes" if adjusted <= ALPHA else "no") if tested else (result.note or "—"),
        "reading": explain(first, second, result, adjusted, metric),
    }


def _table(keyed: list[dict[str, Any]], tests: list[tuple[str, str, Comparison]], metric: str,
           keys: list[str]) -> pd.DataFrame:
    """Rows of ``keys`` values and tests, with the Holm adjustment over the whole table."""
    adjusted = holm([result.p_value for _, _, result in tests])
    rows = [{**key, **_row(first, second, result, value, metric)}
            for key, (first, second, result), value in zip(keyed, tests, adjusted)]
    return pd.DataFrame(rows, columns=[*keys, *COLUMNS])


def _by_variant(frame: pd.DataFrame) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    if not variants(frame):
        yield {}, frame
        return
    for variant, group in frame.groupby("variant", sort=False):
        yield {"variant": variant}, group


def pairs_by_temperature(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """Every pair of methods at each temperature (module docstring), one row each.

    Returns:
        Columns (``variant``,) ``T`` (``"0.1"``, or ``"any (T → 0)"`` for two
        methods that do not depend on it) and :data:`COLUMNS`; empty without ``metric``.
    """
    keys = (["variant"] if variants(frame) else []) + ["T"]
    keyed: list[dict[str, Any]] = []
    tests: list[tuple[str, str, Comparison]] = []
    if metric not in frame.columns:
        return pd.DataFrame(columns=[*keys, *COLUMNS])
    for key, group in _by_variant(frame):
        methods = {method: rows for method, rows in group.groupby("method", sort=False)}
        shared = [method for method, rows in methods.items() if temperature_independent(rows)]
        tempered = [method for method in methods if method not in shared]
        for first, second in combinations(shared, 2):
            keyed.append({**key, "T": SHARED})
            tests.append((first, second, compare(_values(methods[first], metric), _values(methods[second], metric))))
        temperatures = sorted(pd.unique(group.loc[group["method"].isin(tempered), "temperature"]))
        for temperature in temperatures:
            here = [m for m in tempered if (methods[m]["temperature"] == temperature).any()]
            cells = {m: methods[m].loc[methods[m]["temperature"] == temperature] for m in here}
            cells.update({m: methods[m] for m in shared})
            pairs = [*combinations(here, 2), *((m, s) for m in here for s in shared)]
            for first, second in pairs:
                keyed.append({**key, "T": f"{float(temperature):g}"})
                tests.append((first, second, compare(_values(cells[first], metric), _values(cells[second], metric))))
    return _table(keyed, tests, metric, keys)


def pairs_at_best(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """Every pair of methods, each at its best temperature (as the best-temperature table
    picks it, :func:`bayesflow.report.tables.best_cells`), one row each.

    Returns:
        Columns (``variant``,) ``T of A``, ``T of B`` and :data:`COLUMNS`; empty without
        ``metric``.
    """
    keys = (["variant"] if variants(frame) else []) + ["T of A", "T of B"]
    keyed: list[dict[str, Any]] = []
    tests: list[tuple[str, str, Comparison]] = []
    for key, group in _by_variant(best_cells(frame, metric)):
        cells = {method: rows for method, rows in group.groupby("method", sort=False)}
        where = {m: SHARED if temperature_independent(rows) else f"{float(rows['temperature'].iloc[0]):g}"
                 for m, rows in cells.items()}
        for first, second in combinations(cells, 2):
            keyed.append({**key, "T of A": where[first], "T of B": where[second]})
            tests.append((first, second, compare(_values(cells[first], metric), _values(cells[second], metric))))
    return _table(keyed, tests, metric, keys)


def summary(table: pd.DataFrame) -> str:
    """A sentence over a table: how many pairs were tested, how many differ significantly
    after Holm's adjustment, and how many could not be tested (and why)."""
    if table.empty:
        return "No two methods to compare."
    tested = table["significant"].isin(["yes", "no"])
    significant = int((table["significant"] == "yes").sum())
    text = (f"{significant} of {int(tested.sum())} tested pairs differ significantly "
            f"(α = {ALPHA:g} after Holm's adjustment over the {int(tested.sum())} tests of this table).")
    untested = table.loc[~tested, "significant"].value_counts()
    if not untested.empty:
        text += " Not tested: " + ", ".join(f"{count} ({reason})" for reason, count in untested.items()) + "."
    return text


def section(frame: pd.DataFrame, metric: str = "test_nll") -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The report section: an introduction, :func:`pairs_by_temperature` and
    :func:`pairs_at_best`, each table to be shown under its :func:`summary`. With one seed
    per cell the introduction says that no test is possible and both tables are empty."""
    by_temperature = pairs_by_temperature(frame, metric)
    name = NAMES.get(metric, metric)
    if by_temperature.empty:
        return f"_No two methods logged a {name} to compare._", by_temperature, by_temperature
    finished = frame.loc[frame["status"].astype(str) == FINISHED] if "status" in frame else frame
    if finished.groupby(["method", "temperature"])["seed"].nunique().max() < 2:
        empty = by_temperature.iloc[:0]
        text = (f"_Every cell ran one seed: no test across seeds is possible. Run several seeds "
                f"(`seeds: [0, 1, 2]`) to tell the {name} of two methods apart from seed noise._")
        return text, empty, empty
    text = (
        f"Is a gap in {name} between two methods larger than the seeds' noise? Each row tests "
        "method A − method B with a two-sided t-test: **paired by seed** when both finished the "
        "same seeds (a seed fixes every method's initial weights, and every fit is scored on the "
        "same test split), Welch's unpaired test otherwise. `detectable` is the minimum "
        "detectable difference: the smallest true gap the test would find with probability 0.8 "
        f"at α = {ALPHA:g}, given the seeds run and the spread of their differences. The p-values "
        "of each table are adjusted together by Holm's method (`p (Holm)`); `significant` reads "
        "that adjusted p-value. A gap below `detectable` that is not significant is not evidence "
        "that the methods are equal: more seeds would be needed to tell."
    )
    return text, by_temperature, pairs_at_best(frame, metric)
