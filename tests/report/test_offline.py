"""Formulas as MathML, so a report reads the same without a network."""

from __future__ import annotations

import bs4
import nbformat

from bayesflow.report.offline import latex_to_mathml, markdown_with_mathml, with_mathml
from bayesflow.report.render import _export_html

from .pages import formulas_in


def test_inline_and_display_formulas_become_mathml() -> None:
    """`$...$` becomes an inline <math>, `$$...$$` a block one; the theta is a MathML
    identifier, not LaTeX."""
    text = markdown_with_mathml(r"target $p_T(\theta \mid D)$ and $$U(\theta)$$ end")
    assert text.startswith('target <math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">')
    assert 'display="block"' in text and "\\theta" not in text and "$" not in text
    assert "<mi>&#x003B8;</mi>" in text  # θ


def test_code_prices_and_escaped_dollars_stay_as_written() -> None:
    """Code spans, fenced blocks, amounts of money and `\\$` are not formulas."""
    text = "`$HOME` costs $5 and $6, \\$x\\$\n```\n$y$\n```\n"
    assert markdown_with_mathml(text) == text


def test_markup_inside_a_formula_is_refused() -> None:
    """`\\text{<b>...}` would pass HTML through the converter: the formula stays text."""
    assert latex_to_mathml(r"\text{<b>x</b>}") is None
    assert markdown_with_mathml(r"a $\text{<b>x</b>}$") == r"a $\text{<b>x</b>}$"


def test_notebook_cells_and_markdown_outputs_are_converted_on_a_copy() -> None:
    """Markdown cells and text/markdown outputs are converted; the notebook keeps LaTeX."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_markdown_cell("$T$"))
    code = nbformat.v4.new_code_cell("")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": "$x$"})]
    notebook.cells.append(code)
    converted = with_mathml(notebook)
    assert converted.cells[0].source.startswith("<math")
    assert converted.cells[1].outputs[0]["data"]["text/markdown"].startswith("<math")
    assert notebook.cells[0].source == "$T$"


def test_formulas_in_the_exported_html_hold_their_symbols() -> None:
    """The HTML page, not just the notebook: inline, display, heading and Markdown-output
    formulas keep their MathML children and symbols (nbconvert's Markdown renderer closed
    each tag alone, leaving ``<math></math>`` and the symbols as loose text)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_markdown_cell(
        "## Tempered at $T$\n\nThe posterior $p_T(\\theta \\mid D) \\propto \\exp(-U(\\theta)/T)$ and\n\n"
        "$$U(\\theta) = -\\sum_i \\log p(y_i \\mid x_i, \\theta) - \\log p(\\theta)$$\n"
    ))
    code = nbformat.v4.new_code_cell("")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": "best at $T = 0.1$"})]
    notebook.cells.append(code)
    page = _export_html(notebook, title="formulas", show_code=False)
    formulas = formulas_in(page)
    assert len(formulas) == 4
    assert [formula.get("display") for formula in formulas] == ["inline", "inline", "block", "inline"]
    assert "θ" in formulas[1].get_text() and "∝" in formulas[1].get_text()
    assert "∑" in formulas[2].get_text()
    assert "bayesflowformula" not in page
    heading = bs4.BeautifulSoup(page, "html.parser").find("h2")
    assert heading is not None and "<" not in str(heading.get("id"))
