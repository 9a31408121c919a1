"""Tests of the seaborn figures and the results table."""

from __future__ import annotations

import pandas as pd
import pytest

from bayesflow.errors import RegistryError
from bayesflow.report import figures

from .conftest import FAILED_CELL


def _gids(ax, prefix: str) -> list[str]:
    return [line.get_gid() for line in ax.lines if (line.get_gid() or "").startswith(prefix)]


def test_one_line_per_sampled_method(results_frame: pd.DataFrame) -> None:
    """Each sampled method gets exactly one line."""
    ax = figures.metric_vs_temperature(results_frame, "test_nll")
    assert sorted(_gids(ax, "method:")) == ["method:laplace", "method:sghmc"]


def test_temperature_axis_is_logarithmic(results_frame: pd.DataFrame) -> None:
    """The temperature axis is log-scaled with a tick at each grid temperature."""
    ax = figures.metric_vs_temperature(results_frame, "test_nll")
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [0.1, 1.0, 3.0]
    assert "temperature" in ax.get_xlabel()


def test_map_is_a_dashed_reference_line_at_its_mean(results_frame: pd.DataFrame) -> None:
    """MAP (temperature 0) is a dashed horizontal line at its mean over seeds."""
    ax = figures.metric_vs_temperature(results_frame, "test_nll")
    (line,) = [line for line in ax.lines if line.get_gid() == "reference:map"]
    expected = results_frame.loc[results_frame["method"] == "map", "test_nll"].mean()
    assert line.get_linestyle() == "--"
    assert line.get_ydata()[0] == pytest.approx(expected)
    assert line.get_label() == "MAP (T → 0)"


def test_failed_cell_is_marked(results_frame: pd.DataFrame) -> None:
    """The failed fit gets an x at its temperature and a line in the note."""
    ax = figures.metric_vs_temperature(results_frame, "test_nll")
    (marks,) = [item for item in ax.collections if item.get_gid() == "failed"]
    method, temperature, seed = FAILED_CELL
    assert marks.get_offsets()[:, 0].tolist() == [temperature]
    (note,) = [text for text in ax.texts if text.get_gid() == "failed-note"]
    assert f"{method} T={temperature:g} seed {seed}" in note.get_text()


def test_no_failure_marks_without_failures(results_frame: pd.DataFrame) -> None:
    """A frame without failures draws no failure marks."""
    finished = results_frame.loc[results_frame["status"] == "FINISHED"]
    ax = figures.metric_vs_temperature(finished, "test_nll")
    assert not [item for item in ax.collections if item.get_gid() == "failed"]
    assert not [text for text in ax.texts if text.get_gid() == "failed-note"]


def test_axis_label_says_what_the_metric_is(results_frame: pd.DataFrame) -> None:
    """The y label names the metric and which way is better."""
    ax = figures.metric_vs_temperature(results_frame, "test_nll")
    assert ax.get_ylabel() == "test NLL (mean per point, lower is better)"


def test_unknown_plot_name_lists_the_known_ones(results_frame: pd.DataFrame) -> None:
    """An unknown plot name raises a RegistryError listing the valid names."""
    with pytest.raises(RegistryError, match="unknown plot 'nll_vs_seed'.*nll_vs_temperature"):
        figures.plot("nll_vs_seed", results_frame)


def test_results_table_has_one_row_per_method_and_temperature(
    results_frame: pd.DataFrame,
) -> None:
    """The table has a row per (method, temperature) and a column per metric."""
    table = figures.results_table(results_frame)
    assert table.shape == (7, 7)
    assert list(table.columns) == [
        "method",
        "temperature",
        "finished",
        "test_nll",
        "test_accuracy",
        "test_ece",
        "test_brier",
    ]
    assert table["method"].tolist() == ["map"] + ["laplace"] * 3 + ["sghmc"] * 3


def test_results_table_formats_mean_and_spread(results_frame: pd.DataFrame) -> None:
    """Cells read "mean ± sd" and the failed seed is left out and counted."""
    table = figures.results_table(results_frame).set_index(["method", "temperature"])
    assert table.loc[("map", 0.0), "test_nll"] == "0.305 ± 0.007"
    assert table.loc[("sghmc", 3.0), "finished"] == "1/2"
    assert "±" not in table.loc[("sghmc", 3.0), "test_nll"]


def test_values_spanning_a_decade_get_a_log_axis(results_frame: pd.DataFrame) -> None:
    """Laplace at T = 1 ten times worse than the rest: the y axis turns logarithmic and
    its label says so; the plain frame stays linear."""
    assert figures.metric_vs_temperature(results_frame, "test_nll").get_yscale() == "linear"
    wide = results_frame.copy()
    wide.loc[(wide["method"] == "laplace") & (wide["temperature"] == 1.0), "test_nll"] = 13.6
    ax = figures.metric_vs_temperature(wide, "test_nll")
    assert ax.get_yscale() == "log"
    assert "log scale" in ax.get_ylabel()


def test_a_negative_value_keeps_the_axis_linear(results_frame: pd.DataFrame) -> None:
    """A regression NLL can be negative, which a log axis cannot show."""
    wide = results_frame.copy()
    wide.loc[wide["method"] == "laplace", "test_nll"] = -2.0
    wide.loc[wide["method"] == "sghmc", "test_nll"] = 30.0
    assert figures.metric_vs_temperature(wide, "test_nll").get_yscale() == "linear"


def test_flagged_fits_are_circled(results_frame: pd.DataFrame) -> None:
    """Each flagged finished fit is circled at its value; no circle without flags."""
    from .frames import with_flags

    ax = figures.metric_vs_temperature(with_flags(), "test_nll")
    (circles,) = [item for item in ax.collections if item.get_gid() == "flagged"]
    assert sorted(circles.get_offsets()[:, 0].tolist()) == [0.1, 1.0]
    plain = figures.metric_vs_temperature(results_frame, "test_nll")
    assert not [item for item in plain.collections if item.get_gid() == "flagged"]


def test_a_sweep_draws_a_line_style_per_variant() -> None:
    """Two variants: each sampled method has one line per variant, in its own style."""
    from .frames import sweep

    ax = figures.metric_vs_temperature(sweep(), "test_nll")
    styles = {line.get_gid(): line.get_linestyle() for line in ax.lines if line.get_gid()}
    assert styles["method:laplace:prior.variance=0.1"] == "-"
    assert styles["method:laplace:prior.variance=1"] == "--"
    assert "reference:map:prior.variance=1" in styles


def test_regression_plots_draw_rmse_and_the_nearest_coverage() -> None:
    """A regression frame draws NLL, RMSE and coverage (the 95% level, nearest to 90%
    of those logged, with its nominal line); accuracy is not drawable."""
    from .frames import regression

    frame = regression()
    assert figures.drawable_plots(frame) == [
        "nll_vs_temperature", "rmse_vs_temperature", "coverage_vs_temperature"
    ]
    assert figures.drawable_plots(frame, ["accuracy_vs_temperature", "nll_vs_temperature"]) == [
        "nll_vs_temperature"
    ]
    assert figures.plot_metric("coverage_vs_temperature", frame) == "test_coverage_95"
    ax = figures.plot("coverage_vs_temperature", frame)
    (nominal,) = [line for line in ax.lines if line.get_gid() == "nominal"]
    assert nominal.get_ydata()[0] == pytest.approx(0.95)
    assert "95% predictive interval" in ax.get_ylabel()
