"""The flags as one table with anchors, the marks of every table linking to them, the
flagged circles on the mean lines and the legends beside the axes."""

from __future__ import annotations

import bs4
import numpy as np
import pandas as pd

from bayesflow.evaluate.flags import configurational_flag
from bayesflow.report import figures, sections
from bayesflow.report.flags import flag_table
from bayesflow.report.tables import MARK, best_temperature_table, results_table

from .frames import with_flags


def test_the_flags_table_has_one_row_per_cell_and_column_with_a_meaning() -> None:
    """Two flags, two rows: number, fit, column, plain words and the measurement."""
    soup = bs4.BeautifulSoup(flag_table(with_flags()), "html.parser")
    rows = soup.select("table.flags tbody tr")
    assert [row["id"] for row in rows] == ["flag-laplace-T1--test_nll", "flag-sghmc-T0.1--kinetic_temperature_ratio"]
    cells = [cell.get_text() for cell in rows[1].find_all("td")]
    assert cells[0] == f"{MARK} F2" and cells[1] == "sghmc T = 0.1, seed 0" and cells[2] == "kinetic temperature"
    assert "more energy than the temperature allows" in cells[3] and "wider" in cells[3]
    assert flag_table(with_flags().assign(**{"flag/test_nll": "", "flag/kinetic_temperature_ratio": ""})) == ""


def test_every_mark_of_a_shown_table_links_to_a_row_of_the_flags_table() -> None:
    """The results and best-temperature tables' marks are links to existing anchors."""
    frame = with_flags()
    ids = {tag["id"] for tag in bs4.BeautifulSoup(flag_table(frame), "html.parser").find_all(id=True)}
    for table in (results_table(frame, ["test_nll", "test_accuracy"]), best_temperature_table(frame)):
        page = bs4.BeautifulSoup(sections.styled(table).to_html(), "html.parser")
        links = page.select("a.flag-link")
        marks = sum(cell.get_text().count(MARK) for cell in page.find_all("td"))
        assert links and len(links) == marks
        assert {link["href"].lstrip("#") for link in links} <= ids


def test_flagged_circles_sit_on_the_mean_lines() -> None:
    """A flagged fit's circle is drawn at its line's mean over seeds, not at its own value."""
    frame = with_flags()
    frame.loc[(frame["method"] == "sghmc") & (frame["temperature"] == 0.1) & (frame["seed"] == 0), "test_nll"] = 0.9
    ax = figures.metric_vs_temperature(frame, "test_nll")
    (circles,) = [item for item in ax.collections if item.get_gid() == "flagged"]
    (line,) = [item for item in ax.lines if item.get_gid() == "method:sghmc"]
    on_line = dict(zip(line.get_xdata(), line.get_ydata()))
    for x, y in circles.get_offsets():
        if x == 0.1:
            assert np.isclose(y, on_line[0.1])


def test_the_legend_is_beside_the_axes_of_a_page_wide_figure() -> None:
    """Even a short legend sits outside the data, and the figure spans the page."""
    import matplotlib.pyplot as plt

    figures.apply_theme()
    frame = with_flags()
    figure, ax = plt.subplots(figsize=figures.PAGE_FIGURE)
    figures.metric_vs_temperature(frame, "test_nll", ax=ax)
    figure.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1
    assert figure.get_size_inches()[0] * figure.dpi >= 1200


def test_a_negative_configurational_temperature_is_explained() -> None:
    """The flag and the report's note say in plain words what a negative ratio means."""
    flag = configurational_flag({"configurational_temperature_ratio": -1.55, "configurational_temperature_ratio_se": 0.1})
    assert flag is not None and "negative" in flag and "colder" not in flag
    frame = pd.DataFrame({"method": ["sghmc"], "temperature": [0.1], "seed": [0], "status": ["FINISHED"],
                          "configurational_temperature_ratio": [-1.55]})
    note = sections.configurational_note(frame)
    assert "negative configurational temperature ratio" in note.lower() and "-1.55" in note
    assert sections.configurational_note(frame.assign(configurational_temperature_ratio=0.9)) == ""
