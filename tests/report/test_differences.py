"""The "Differences across seeds" tables (bayesflow.report.differences): every row the
significance module's test of the cells' seeds, Holm over each table, and the report."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bayesflow.evaluate.significance import holm
from bayesflow.report import bundle, differences, render_report

from .conftest import synthetic_results
from .frames import sweep


def noisy(seeds: int = 4) -> pd.DataFrame:
    """MAP (shared), Laplace and SGHMC at T = 0.1 and 1 over ``seeds`` seeds: Laplace is
    0.05 nats worse than SGHMC at T = 1, every fit has its own noise (sd 0.002), and
    SGHMC at T = 1 failed at the last seed."""
    generator = np.random.default_rng(3)
    rows = []
    for method, temperatures in [("map", (0.0,)), ("laplace", (0.1, 1.0)), ("sghmc", (0.1, 1.0))]:
        for temperature in temperatures:
            for seed in range(seeds):
                failed = (method, temperature, seed) == ("sghmc", 1.0, seeds - 1)
                worse = 0.05 if (method, temperature) == ("laplace", 1.0) else 0.0
                nll = 0.3 + 0.01 * seed + worse + generator.normal(0, 0.002)
                rows.append({"method": method, "engine": method, "temperature": temperature,
                             "temperature_shared": method == "map", "seed": seed,
                             "status": "FAILED" if failed else "FINISHED",
                             "test_nll": math.nan if failed else nll,
                             "cell": f"fit/{method}/T={temperature:g}/seed={seed}"})
    return pd.DataFrame(rows)


def values(frame: pd.DataFrame, method: str, temperature: float) -> pd.Series:
    """The finished test NLLs of a cell by seed."""
    cell = frame.loc[(frame["method"] == method) & (frame["temperature"] == temperature)
                     & (frame["status"] == "FINISHED")]
    return cell.set_index("seed")["test_nll"].sort_index()


def test_each_pair_at_each_temperature_is_scipy_paired_or_welch_test_with_holm() -> None:
    """Rows: at T = 0.1 and 1, Laplace−SGHMC and each against MAP. Same seeds: ttest_rel
    by seed; SGHMC at T = 1 lost a seed: Welch. Holm is over the table's six p-values."""
    frame = noisy()
    table = differences.pairs_by_temperature(frame)
    assert list(zip(table["T"], table["method A"], table["method B"])) == [
        ("0.1", "laplace", "sghmc"), ("0.1", "laplace", "map"), ("0.1", "sghmc", "map"),
        ("1", "laplace", "sghmc"), ("1", "laplace", "map"), ("1", "sghmc", "map"),
    ]
    laplace, sghmc, map_ = values(frame, "laplace", 0.1), values(frame, "sghmc", 0.1), values(frame, "map", 0.0)
    expected = [
        stats.ttest_rel(laplace, sghmc).pvalue, stats.ttest_rel(laplace, map_).pvalue,
        stats.ttest_rel(sghmc, map_).pvalue,
        stats.ttest_ind(values(frame, "laplace", 1.0), values(frame, "sghmc", 1.0), equal_var=False).pvalue,
        stats.ttest_rel(values(frame, "laplace", 1.0), map_).pvalue,
        stats.ttest_ind(values(frame, "sghmc", 1.0), map_, equal_var=False).pvalue,
    ]
    assert list(table["test"]) == ["paired", "paired", "paired", "welch", "paired", "welch"]
    assert [float(p) for p in table["p"]] == pytest.approx(expected, rel=5e-3)  # shown to 3 digits
    assert [float(p) for p in table["p (Holm)"]] == pytest.approx(holm(expected), rel=5e-3)
    worse = table.iloc[4]
    assert worse["significant"] == "yes" and worse["reading"].startswith("map's test NLL is lower by 0.05")
    assert float(worse["A − B"]) == pytest.approx(0.05, abs=0.01)


def test_best_temperatures_are_compared_pairwise() -> None:
    """At the best temperatures (MAP any, Laplace 0.1, SGHMC 0.1 or 1): three pairs, each
    row naming both temperatures."""
    table = differences.pairs_at_best(noisy())
    assert list(zip(table["method A"], table["method B"])) == [("map", "laplace"), ("map", "sghmc"), ("laplace", "sghmc")]
    assert table.iloc[0]["T of A"] == "T → 0" and table.iloc[0]["T of B"] == "0.1"


def test_zero_spread_ties_and_one_seed_say_so() -> None:
    """The synthetic frame's NLL moves by the same 0.01 per seed for every method: Laplace
    and SGHMC tie, MAP's gap is the same at every seed (no spread, detectable 0), and the
    failed SGHMC seed at T = 3 leaves one seed; nothing is tested, nothing divides by 0."""
    table = differences.pairs_by_temperature(synthetic_results())
    assert set(table["significant"]) == {"tie", "no spread", "one seed"}
    assert (table.loc[table["significant"] != "one seed", "detectable"] == "0").all()
    assert (table["p"] == "—").all()
    assert differences.summary(table) == (
        "0 of 0 tested pairs differ significantly (α = 0.05 after Holm's adjustment over the 0 tests "
        "of this table). Not tested: 5 (no spread), 2 (tie), 2 (one seed)."
    )


def test_one_seed_per_cell_says_no_test_is_possible() -> None:
    """Every cell with one seed: the section says so and shows no table."""
    text, by_temperature, at_best = differences.section(noisy(1))
    assert "Every cell ran one seed: no test across seeds is possible" in text
    assert by_temperature.empty and at_best.empty


def test_shared_methods_meet_once_and_a_sweep_keeps_its_variants() -> None:
    """Two methods that do not depend on T are compared once, at T → 0; a sweep's tables
    carry the variant and compare only within it."""
    frame = noisy()
    ensemble = frame.loc[frame["method"] == "map"].assign(method="deep_ensemble")
    table = differences.pairs_by_temperature(pd.concat([frame, ensemble], ignore_index=True))
    shared = table.loc[table["T"] == "T → 0"]
    assert list(zip(shared["method A"], shared["method B"])) == [("map", "deep_ensemble")]
    swept = differences.pairs_by_temperature(sweep())
    assert list(swept.columns[:2]) == ["variant", "T"] and len(swept) == 2 * 9


@pytest.mark.slow
def test_the_report_shows_the_differences_section(tmp_path: Path) -> None:
    """The default template, run by papermill and converted by nbconvert, shows both
    tables with their sentences, and nested R-hat beside the other sampler diagnostics
    ("—" for a cell that logged none)."""
    frame = noisy()
    sghmc = frame["method"] == "sghmc"
    frame.loc[sghmc, "kinetic_temperature_ratio"] = 1.0
    frame.loc[sghmc & (frame["temperature"] == 0.1), "nested_rhat_max"] = 1.0042
    folder = bundle.write(tmp_path / "bundle", frame)
    parameters = {"bundle": folder, "workflow": "study", "plots": [], "tracking_uri": "",
                  "spec_yaml": "name: study\n", "run_info": {}}
    report = render_report("cold_posterior", parameters, tmp_path / "out")
    notebook = nbformat.read(report.notebook, as_version=4)
    assert not [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    html = report.html.read_text(encoding="utf-8")
    assert "Differences across seeds" in html and "paired by seed" in html
    assert "At each temperature." in html and "At each method's best temperature" in html
    assert "only gaps above" in html and "lower by 0.05" in html
    diagnostics = html[html.index("Sampler diagnostics"):]
    assert "nested_rhat_max" in diagnostics and "1.004" in diagnostics and "—" in diagnostics
