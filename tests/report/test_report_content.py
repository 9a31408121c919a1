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


def _section_text(soup, title: str) -> str:
    """The text from the heading ``title`` to the next second-level heading."""
    (heading,) = [h for h in soup.find_all("h2") if h.get_text().strip().startswith(title)]
    parts = []
    for element in heading.find_all_next():
        if element.name == "h2":
            break
        if element.name in ("p", "li"):
            parts.append(element.get_text(" ", strip=True))
    return "\n".join(parts)


def _png_widths(page: str) -> list[int]:
    import base64
    import struct

    widths = []
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page):
        header = base64.b64decode(data[:64])
        widths.append(struct.unpack(">I", header[16:20])[0])  # the IHDR chunk's width
    return widths


@pytest.mark.slow
def test_the_report_opens_with_its_answer_and_links_its_flags(tmp_path: Path) -> None:
    """The first section names the winner chosen on validation, its test numbers and the
    runner-up's verdict; the metric figures are page-wide; each flag mark links to a row
    of the one flags table, and the page's style fits every image to the content."""
    import bs4

    from bayesflow.report import answer

    from .test_answer import validated

    frame = with_flags(validated().assign(run_id="r"))
    _, html = _render(tmp_path, frame, ["nll_vs_temperature", "accuracy_vs_temperature"])
    soup = bs4.BeautifulSoup(html, "html.parser")
    assert soup.find_all("h2")[0].get_text().strip().startswith("The answer")
    opening = _section_text(soup, "The answer")
    choices = answer.ranked(frame)
    winner, second = choices[0], choices[1]
    nll = list(winner.values("test_nll").values())
    assert f"Best: {winner.method}" in opening and "chosen on the validation NLL" in opening
    assert f"test NLL {sum(nll) / len(nll):.3f} ±" in opening
    assert f"Runner-up: {second.method}" in opening and "significant" in opening
    widths = _png_widths(html)
    assert len(widths) >= 2 and all(width >= 1200 for width in widths[:2])
    assert ".jp-RenderedImage img { max-width: 100%" in html
    assert len(soup.select("table.flags")) == 1
    links = soup.select("a.flag-link")
    assert links and all(soup.find(id=link["href"].lstrip("#")) is not None for link in links)


def test_every_bundled_template_opens_with_its_answer() -> None:
    """The first second-level heading of each shipped report template is its answer."""
    from bayesflow.report import find_template, list_templates

    for name in list_templates():
        text = find_template(name).read_text()
        headings = re.findall(r"^# ## (.+)$", text, flags=re.MULTILINE)
        assert headings and headings[0] == "The answer", (name, headings[:2])
        assert "answer.opening(" in text or "answer.compare_opening(" in text, name
