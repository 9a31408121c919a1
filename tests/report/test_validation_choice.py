"""The best temperature (and a sweep's best variant) chosen on the validation rows, with
the test metrics reported at that choice; chosen on test, and labelled so, without them."""

from __future__ import annotations

import math

import pandas as pd

from bayesflow.report import sections, suggest, tables

from .conftest import synthetic_results
from .frames import sweep


def with_validation(frame: pd.DataFrame) -> pd.DataFrame:
    """`val_nll` lowest at T = 1 (the test NLL is lowest at T = 0.1): the two rows
    disagree, as they can when the test set is small. 0.40 + 0.05 (ln T)² + 0.02 seed."""
    val = 0.40 + 0.05 * frame["temperature"].map(lambda t: math.log(t) ** 2 if t > 0 else 0.0)
    val = val + 0.02 * frame["seed"]
    return frame.assign(val_nll=val.where(frame["status"] == "FINISHED"))


def test_the_best_temperature_is_chosen_on_validation_and_reports_test() -> None:
    """Laplace: test NLL is lowest at T = 0.1, validation NLL at T = 1; the table picks
    T = 1, says `validation`, and prints the test NLL and accuracy at T = 1."""
    plain = tables.best_temperature_table(synthetic_results()).set_index("method")
    assert plain.loc["laplace", "best T"] == "0.1" and plain.loc["laplace", "chosen on"] == "test"
    table = tables.best_temperature_table(with_validation(synthetic_results())).set_index("method")
    assert list(table.columns) == ["best T", "chosen on", "test_nll", "test_accuracy", "val_nll", "seeds finished"]
    assert table.loc["laplace", "best T"] == "1" and table.loc["laplace", "chosen on"] == "validation"
    # test NLL at T = 1: 0.30 + 0.05 ln 2 + 0.01 seed over seeds 0, 1 (mean 0.3397, sd 0.0071)
    assert table.loc["laplace", "test_nll"] == "0.340 ± 0.007"
    assert table.loc["laplace", "test_accuracy"] == "0.890 ± 0.000"
    assert table.loc["laplace", "val_nll"] == "0.410 ± 0.014"
    assert table.loc["map", "best T"] == "T → 0" and table.loc["map", "chosen on"] == "validation"


def test_best_cells_follow_the_validation_choice() -> None:
    cells = tables.best_cells(with_validation(synthetic_results()))
    assert sorted(set(zip(cells["method"], cells["temperature"]))) == [
        ("laplace", 1.0), ("map", 0.0), ("sghmc", 1.0)
    ]


def test_a_method_without_validation_metrics_is_chosen_on_test() -> None:
    """Per method: one that logged no val_nll is chosen on test, labelled `test`."""
    frame = with_validation(synthetic_results())
    frame.loc[frame["method"] == "sghmc", "val_nll"] = math.nan
    table = tables.best_temperature_table(frame).set_index("method")
    assert table.loc["sghmc", "chosen on"] == "test" and table.loc["sghmc", "best T"] == "0.1"
    assert table.loc["sghmc", "val_nll"] == "—"
    assert table.loc["laplace", "chosen on"] == "validation"
    text, _ = sections.best_temperature(frame)
    assert "optimistic" in text


def test_the_sentence_says_which_rows_chose() -> None:
    text, _ = sections.best_temperature(with_validation(synthetic_results()))
    assert "lowest mean **validation** NLL" in text and "took no part" in text
    text, _ = sections.best_temperature(synthetic_results())
    assert "chosen on the test NLL it reports" in text


def test_a_sweeps_best_variant_is_chosen_on_validation() -> None:
    """The second variant's test NLL is 0.1 higher everywhere, its validation NLL 0.1
    lower: on validation the second wins, on test (no val_nll) the first."""
    frame = sweep()
    assert tables.best_variants(frame) == {
        method: ("prior.variance=0.1", "test") for method in ("map", "laplace", "sghmc")
    }
    second = frame["variant"] == "prior.variance=1"
    validated = with_validation(frame)
    validated.loc[second, "val_nll"] -= 0.1
    assert tables.best_variants(validated) == {
        method: ("prior.variance=1", "validation") for method in ("map", "laplace", "sghmc")
    }
    text, compared = sections.swept_keys(validated)
    assert "`laplace`: `prior.variance=1` (chosen on validation)" in text
    assert compared.set_index("method").loc["laplace", "prior.variance=1"] == "0.440 ± 0.007 (T=1)"


def test_a_suggested_temperature_is_the_vertex_of_an_exact_parabola_in_log_t() -> None:
    """Validation NLLs exactly a + b (ln T − ln T*)² on a coarse grid: the vertex is T*,
    for a T* between grid points at either side of the best one."""
    grid = [0.001, 0.00562, 0.0316, 0.178, 1.0]
    for best in (0.012, 0.07):
        values = [0.2 + 0.03 * (math.log(t) - math.log(best)) ** 2 for t in grid]
        found = suggest.suggested_temperature(grid, values)
        assert found is not None and math.isclose(found, best, rel_tol=1e-9)


def test_no_suggestion_at_the_grid_edge() -> None:
    """The lowest value first or last (ties: the first), or too few points: None."""
    assert suggest.suggested_temperature([0.1, 1.0, 3.0], [0.1, 0.2, 0.3]) is None
    assert suggest.suggested_temperature([0.1, 1.0, 3.0], [0.2, 0.2, 0.2]) is None
    assert suggest.suggested_temperature([0.1, 1.0], [0.3, 0.2]) is None


def test_a_suggestion_stays_between_the_neighbours_of_the_best() -> None:
    """A lopsided minimum (linear on one side) still gives a T inside the bracket."""
    found = suggest.suggested_temperature([0.01, 0.1, 1.0, 10.0], [0.9, 0.3, 0.31, 2.0])
    assert found is not None and 0.01 < found < 1.0


def test_the_report_suggests_only_where_validation_metrics_exist() -> None:
    """with_validation's val_nll is a parabola in ln T with vertex at T = 1 (Laplace, every
    seed finished; SGHMC lost a seed at T = 3, so its means are not one parabola); MAP
    (no grid) gets no suggestion; without val_nll nothing is said."""
    found = suggest.suggested_temperatures(with_validation(synthetic_results()))
    assert set(found) == {("laplace",), ("sghmc",)}
    assert found[("laplace",)] is not None and math.isclose(found[("laplace",)], 1.0, rel_tol=1e-9)
    assert found[("sghmc",)] is not None
    text, _ = sections.best_temperature(with_validation(synthetic_results()))
    assert "*Suggested, not fitted:*" in text and "`laplace` T ≈ 1;" in text
    assert suggest.suggested_temperatures(synthetic_results()) == {}
    assert "Suggested" not in sections.best_temperature(synthetic_results())[0]
