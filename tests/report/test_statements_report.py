"""The statements evaluation in a report: the per-statement frame, Tables 1 and 2 and
the figures, from hand-made results and arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesflow.report import experiments, sections
from bayesflow.report import statements as statement_report


def results() -> pd.DataFrame:
    return pd.DataFrame({
        "method": ["sgd", "ensemble", "ensemble"], "temperature": [0.0, 0.0, 0.0], "seed": [0, 0, 1],
        "cell": ["fit/sgd/0", "fit/ensemble/0", "fit/ensemble/1"],
        "statements_auroc_tu": [0.5, 0.6, 0.8], "statements_auroc_eu": [0.5, 0.7, 0.9],
        "statements_nll_in": [3.0, 2.0, 4.0],
    })


def arrays(offset: float, count: int = 4) -> dict[str, np.ndarray]:
    values = {}
    for suffix, shift in (("in", 0.0), ("ood", 1.0)):
        for name in ("tu", "au", "eu", "nll"):
            values[f"statements_{name}_{suffix}"] = np.arange(count) + offset + shift
    return values


def test_the_frame_has_one_row_per_fit_and_statement() -> None:
    """Every fit with arrays gives its in- and out-of-distribution statements in order;
    a fit without them is left out."""
    long = statement_report.statements_frame(results(), {"fit/sgd/0": arrays(0.0), "fit/ensemble/0": arrays(10.0),
                                                          "fit/ensemble/1": {"other": np.zeros(2)}})
    assert len(long) == 2 * 2 * 4 and set(long["cell"]) == {"fit/sgd/0", "fit/ensemble/0"}
    sgd = long.loc[long["method"] == "sgd"]
    assert sgd.loc[sgd["inputs"] == "in-distribution", "total"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert sgd.loc[sgd["inputs"] == "out-of-distribution", "nll"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert sgd["statement"].tolist() == [0, 1, 2, 3] * 2
    assert statement_report.statements_frame(results(), {}).empty


def test_a_table_is_the_mean_and_sd_over_seeds_in_the_specs_order() -> None:
    table = statement_report.statement_table(
        results(), {"statements_auroc_tu": "AUROC (TU)", "statements_auroc_eu": "AUROC (EU)",
                    "missing": "never"}, order=["sgd", "ensemble"])
    assert list(table.columns) == ["method", "AUROC (TU)", "AUROC (EU)"]
    table = table.set_index("method")
    assert list(table.index) == ["sgd", "ensemble"]
    assert table.loc["sgd", "AUROC (TU)"] == "0.500"
    assert table.loc["ensemble", "AUROC (EU)"] == f"0.800 ± {np.std([0.7, 0.9], ddof=1):.3f}"
    # the displayed table names every method (a styled table hides the index)
    html = sections.styled(table.reset_index()).to_html()
    assert "sgd" in html and "ensemble" in html


def test_the_figures_draw_one_column_or_box_per_method() -> None:
    long = statement_report.statements_frame(results(), {"fit/sgd/0": arrays(0.0), "fit/ensemble/0": arrays(10.0)})
    figure = experiments.uncertainty_distributions(long, order=["sgd", "ensemble"])
    assert [axis.get_title() for axis in figure.axes[:2]] == ["sgd", "ensemble"]
    boxes = statement_report.statement_nll(long, order=["ensemble", "sgd"])
    assert [label.get_text() for label in boxes.axes[0].get_xticklabels()] == ["ensemble", "sgd"]
