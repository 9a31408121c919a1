"""The default report rendered from hand-made bundles: offline formulas, the header,
best temperatures, flags, a sweep, and a regression study (two renders, a kernel each)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from bayesflow.report import bundle, render_report
from bayesflow.report.tables import MARK

from .frames import regression, sweep, with_flags
from .pages import formulas_in

RUN_INFO = {"version": "9.9.9", "commit": "feedc0ffee0123456789", "rendered": "2026-01-02 03:04 UTC",
            "machine": "testbox (2 CPUs, Linux)", "device": "cpu"}


def _render(tmp_path: Path, frame: pd.DataFrame, plots: list[str] | None) -> tuple[Path, str]:
    folder = bundle.write(tmp_path / "bundle", frame.drop(columns="run_id"))
    parameters = {
        "bundle": folder, "workflow": "study", "plots": plots, "tracking_uri": "",
        "spec_yaml": "name: study\ndescription: 'prices in $ <script>alert(1)</script>'\n",
        "run_info": RUN_INFO,
    }
    report = render_report("cold_posterior", parameters, tmp_path / "out")
    notebook = nbformat.read(report.notebook, as_version=4)
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    return report.html, report.html.read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_flagged_sweep_renders_offline_with_header_best_and_flags(tmp_path: Path) -> None:
    """Formulas are MathML and no script loads from anywhere; the header names version,
    commit, date, machine and device; the best-temperature table, the flags with their
    marks, and the comparison along the swept key are shown; user strings are escaped."""
    _, html = _render(tmp_path, with_flags(sweep()), ["nll_vs_temperature", "accuracy_vs_temperature"])
    assert len(formulas_in(html)) >= 5  # each holds its symbols, not an empty <math>
    assert not re.search(r"\$\\(theta|to|mid|langle)", html) and "$T" not in html
    assert "<script" not in html and "mathjax" not in html.lower()
    for fact in ("bayesflow 9.9.9", "feedc0ffee01", "2026-01-02 03:04 UTC", "testbox (2 CPUs, Linux)"):
        assert fact in html
    assert "Best temperature per method" in html and "T → 0" in html
    assert MARK in html and "&lt;b&gt;hot&lt;/b&gt;" in html and "<b>hot" not in html
    assert "Along the swept keys" in html and "prior.variance=1" in html
    assert "alert(1)" in html and "<script>alert" not in html
    assert html.count('src="data:image/png;base64,') >= 2


@pytest.mark.slow
def test_a_regression_study_renders_with_rmse_and_no_accuracy(tmp_path: Path) -> None:
    """No accuracy logged: the template draws NLL, RMSE and coverage (its default, from
    the frame), shows RMSE in the tables, and has no sweep section."""
    _, html = _render(tmp_path, regression(), None)
    assert html.count('src="data:image/png;base64,') == 3
    assert "test_rmse" in html and "test_accuracy" not in html
    assert "Along the swept keys" not in html and MARK not in html
