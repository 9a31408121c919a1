"""Tables of the report: best temperature per method, flags next to numbers, variants."""

from __future__ import annotations

import pandas as pd

from bayesflow.report import tables

from .conftest import synthetic_results
from .frames import HOT, regression, sweep, with_flags


def test_best_temperature_per_method(results_frame: pd.DataFrame) -> None:
    """Each method's row holds the temperature of lowest mean NLL with its mean ± sd and
    accuracy there; MAP, which does not depend on T, has one row; the failed seed of
    SGHMC at T = 3 is not where its best is, so both seeds count."""
    table = tables.best_temperature_table(results_frame).set_index("method")
    assert list(table.columns) == ["best T", "chosen on", "test_nll", "test_accuracy", "seeds finished"]
    assert table.index.tolist() == ["map", "laplace", "sghmc"]
    assert set(table["chosen on"]) == {"test"}  # no validation metrics: chosen on test
    assert table.loc["map", "best T"] == "T → 0"
    assert table.loc["laplace", "best T"] == "0.1"
    assert table.loc["laplace", "test_nll"] == "0.310 ± 0.007"
    assert table.loc["laplace", "test_accuracy"] == "0.899 ± 0.000"
    assert table.loc["sghmc", "seeds finished"] == "2/2"


def test_best_temperature_counts_failed_seeds_and_uses_rmse_for_regression() -> None:
    """A regression frame shows RMSE beside the NLL; where the best cell lost a seed the
    count says so."""
    frame = regression()
    best_is_hot = (frame["method"] == "sghmc") & (frame["temperature"] == 3.0) & (frame["seed"] == 0)
    frame.loc[best_is_hot, "test_nll"] = 0.01  # SGHMC's best is now T = 3, whose seed 1 failed
    table = tables.best_temperature_table(frame).set_index("method")
    assert "test_rmse" in table.columns and "test_accuracy" not in table.columns
    assert table.loc["sghmc", "best T"] == "3"
    assert table.loc["sghmc", "seeds finished"] == "1/2"
    assert table.loc["sghmc", "test_rmse"] == "0.800"


def test_no_flag_columns_no_marks(results_frame: pd.DataFrame) -> None:
    """Without flag columns nothing is marked and no flag is listed."""
    assert tables.MARK not in "".join(tables.results_table(results_frame).astype(str).sum())
    assert tables.flag_notes(results_frame).empty


def test_flags_mark_the_numbers_they_concern() -> None:
    """A flag on the NLL marks that cell's NLL (a mean over seeds of which one is
    flagged); a flag on a column the table does not show marks the row's `finished`."""
    table = tables.results_table(with_flags()).set_index(["method", "temperature"])
    assert table.loc[("laplace", 1.0), "test_nll"] == f"0.340 ± 0.007 {tables.MARK}"
    assert tables.MARK not in table.loc[("laplace", 1.0), "test_accuracy"]
    assert table.loc[("sghmc", 0.1), "finished"] == f"2/2 {tables.MARK}"
    assert tables.MARK not in table.loc[("sghmc", 0.1), "test_nll"]
    assert tables.MARK not in table.loc[("laplace", 3.0), "test_nll"]
    diagnostics = tables.results_table(with_flags(), ["kinetic_temperature_ratio"])
    marked = diagnostics.set_index(["method", "temperature"])["kinetic_temperature_ratio"]
    assert marked[("sghmc", 0.1)] == f"3.000 ± 2.828 {tables.MARK}"


def test_flag_notes_list_each_flag() -> None:
    """Each flag is one note: method, temperature, seed, column and message."""
    notes = tables.flag_notes(with_flags())
    assert notes[["method", "temperature", "seed", "column"]].values.tolist() == [
        ["laplace", 1.0, 1, "test_nll"], ["sghmc", 0.1, 0, "kinetic_temperature_ratio"],
    ]
    assert notes["message"].tolist()[1] == HOT


def test_a_flag_on_a_failed_fit_is_not_listed() -> None:
    """Failed fits are left out of the numbers, so their flags mark nothing."""
    frame = with_flags()
    failed = frame["status"] != "FINISHED"
    frame.loc[failed, "flag/test_nll"] = "should not show"
    assert "should not show" not in tables.flag_notes(frame)["message"].tolist()


def test_without_variants_the_tables_are_as_before(results_frame: pd.DataFrame) -> None:
    """One variant (or none) keeps the plain tables: no variant column, no comparison."""
    one = results_frame.assign(variant="prior.variance=1")
    assert tables.variants(results_frame) == [] and tables.variants(one) == []
    assert "variant" not in tables.results_table(one).columns
    assert tables.variant_table(one).empty


def test_a_sweep_groups_by_variant_and_compares_the_best_nll() -> None:
    """With two variants the results and best-temperature tables have a row per variant,
    and the comparison puts each variant's best NLL side by side."""
    frame = sweep()
    assert tables.variants(frame) == ["prior.variance=0.1", "prior.variance=1"]
    results = tables.results_table(frame)
    assert results.columns[0] == "variant" and len(results) == 14
    best = tables.best_temperature_table(frame)
    assert best[["variant", "method"]].values.tolist()[:2] == [
        ["prior.variance=0.1", "map"], ["prior.variance=0.1", "laplace"]
    ]
    compared = tables.variant_table(frame).set_index("method")
    assert list(compared.columns) == ["prior.variance=0.1", "prior.variance=1"]
    assert compared.loc["laplace", "prior.variance=0.1"] == "0.310 ± 0.007 (T=0.1)"
    assert compared.loc["laplace", "prior.variance=1"] == "0.410 ± 0.007 (T=0.1)"
    assert compared.loc["map", "prior.variance=1"] == "0.405 ± 0.007 (T → 0)"


def test_summary_metrics_follow_the_task() -> None:
    """Classification frames summarise NLL, accuracy, ECE, Brier; regression frames NLL,
    RMSE and the coverages by rising level."""
    assert tables.summary_metrics(synthetic_results()) == [
        "test_nll", "test_accuracy", "test_ece", "test_brier"
    ]
    assert tables.summary_metrics(regression()) == [
        "test_nll", "test_rmse", "test_coverage_50", "test_coverage_95"
    ]


def test_best_cells_are_the_rows_at_each_best_temperature() -> None:
    """The flags under the best-temperature table are those of its fits: SGHMC's hot
    chain at T = 0.1 (its best) is there, Laplace's flag at T = 1 (not its best) is not."""
    cells = tables.best_cells(with_flags())
    assert sorted(set(zip(cells["method"], cells["temperature"]))) == [
        ("laplace", 0.1), ("map", 0.0), ("sghmc", 0.1)
    ]
    assert tables.flag_notes(cells)["column"].tolist() == ["kinetic_temperature_ratio"]


def test_a_per_temperature_fit_at_t_0_is_not_temperature_free() -> None:
    """VI fitted at T = 0 (temperature_shared false) has its best at 0, written "0", not
    the temperature-free MAP's "T → 0"; and it is not drawn as a T → 0 line."""
    frame = synthetic_results()
    vi = frame[frame["method"] == "laplace"].assign(method="vi", engine="vi")
    vi.loc[vi["temperature"] == vi["temperature"].min(), "temperature"] = 0.0
    vi.loc[vi["temperature"] == 0.0, "test_nll"] = 0.01
    frame = pd.concat([frame, vi], ignore_index=True)
    table = tables.best_temperature_table(frame).set_index("method")
    assert table.loc["vi", "best T"] == "0" and table.loc["map", "best T"] == "T → 0"
    assert tables.temperature_free(frame).tolist() == (frame["method"] == "map").tolist()
