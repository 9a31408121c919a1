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
