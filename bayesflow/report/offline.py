"""A report that reads the same without a network: formulas as MathML, no CDN scripts.

nbconvert's HTML leaves LaTeX (``$...$``) in the page for MathJax, which it loads from a
CDN, along with require.js; opened offline the reader sees raw dollars. Before export,
:func:`with_mathml` rewrites the LaTeX of every Markdown cell and Markdown output into
MathML (``<math>`` elements, which browsers draw natively) with the pure-Python
``latex2mathml``, and :func:`exporter_options` selects a template without the CDN
``<script>`` tags. Code (fenced blocks and inline spans) is left as written, and a
formula that does not convert stays as its text.

**MathML never passes through the Markdown renderer.** nbconvert's renderer (mistune)
reads raw HTML inside Markdown one tag at a time, and with ``embed_images`` it re-parses
each tag alone with BeautifulSoup to embed ``<img>`` sources, which closes it on the
spot: ``<math><mi>p</mi></math>`` came out as ``<math></math><mi></mi>p`` (every formula
of every report empty, the symbols loose text). So :func:`with_mathml` puts a
placeholder of letters and digits where each formula goes, and
:meth:`Formulas.restore` puts the MathML into the exported HTML.
"""

from __future__ import annotations

import contextlib
import copy
import html
import re
import secrets
import threading
from typing import Any

from jinja2 import DictLoader

__all__ = [
    "OFFLINE_TEMPLATE", "PAGE_STYLE", "Formulas", "exporter_options", "html_exporter", "latex_to_mathml",
    "prepare_export", "with_mathml", "with_page_style",
]

OFFLINE_TEMPLATE = "bayesflow_offline.html.j2"
# The JupyterLab template without the blocks that load require.js, MathJax and Mermaid
# from a CDN: the report runs no script.
_TEMPLATE = """\
{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""

# Code that must stay as written: fenced blocks first, then inline spans.
_CODE = re.compile(r"(^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\2[ \t]*$|`+[^`\n]*?`+)", re.MULTILINE | re.DOTALL)
# $$display$$, then $inline$ (pandoc's rule: no space inside the dollars, no digit after
# the closing one, so "$5 and $6" is prose); a backslash-escaped dollar is text.
_MATH = re.compile(r"(?<![\\$])\$\$(.+?)\$\$|(?<![\\$])\$(?![\s$])([^$\n]+?)(?<![\s\\])\$(?![\d$])", re.DOTALL)
# What converted MathML may contain: MathML elements only, no event handler, no link.
_MATHML_TAGS = {
    "math", "mrow", "mi", "mo", "mn", "ms", "msub", "msup", "msubsup", "mfrac", "msqrt",
    "mroot", "mover", "munder", "munderover", "mtext", "mspace", "mstyle", "mtable", "mtr",
    "mtd", "mpadded", "mphantom", "menclose", "merror", "mfenced", "mmultiscripts",
    "mprescripts", "none", "semantics", "annotation",
}
_FUNCTION = re.compile(r"(<mi>(?:log|exp|ln|sin|cos|tan|det|min|max)</mi>)")
_TAG = re.compile(r"</?\s*([A-Za-z][\w:-]*)")


PAGE_STYLE = """<style>
/* bayesflow: a figure drawn page-wide (1,300 px) shrinks to the content's width, never overflows it */
.jp-RenderedImage img { max-width: 100%; height: auto; }
/* the flags table: compact, left-aligned, the row a flag mark links to highlighted */
.jp-RenderedHTMLCommon table.flags { border-collapse: collapse; font-size: 0.92em; table-layout: auto; }
.jp-RenderedHTMLCommon table.flags td, .jp-RenderedHTMLCommon table.flags th {
  padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
.jp-RenderedHTMLCommon table.flags td:nth-child(-n+3) { white-space: nowrap; }
.jp-RenderedHTMLCommon table.flags tr:target { background: #fff3cd; }
a.flag-link { color: #b00020; text-decoration: none; }
</style>
"""
"""The page's own style, put in the head of every report: a figure is never wider than the
content (a page-wide figure, 13 inches at 100 dpi, is 1,300 px and shrinks to fit), and
the flags table (:mod:`bayesflow.report.flags`) is compact and left-aligned."""


def with_page_style(page: str) -> str:
    """``page`` with :data:`PAGE_STYLE` at the end of its head (at its start without one)."""
    head = page.find("</head>")
    return page[:head] + PAGE_STYLE + page[head:] if head >= 0 else PAGE_STYLE + page


def exporter_options() -> dict[str, Any]:
    """Keyword arguments of nbconvert's ``HTMLExporter`` for a page without CDN scripts."""
    return {
        "extra_loaders": [DictLoader({OFFLINE_TEMPLATE: _TEMPLATE})],
        "template_file": OFFLINE_TEMPLATE,
    }


def latex_to_mathml(latex: str, display: bool = False) -> str | None:
    """One formula as a ``<math>`` element, or None when it does not convert or the
    result holds anything but MathML (``\\text{<b>}`` is passed through by the converter)."""
    from latex2mathml.converter import convert

    try:
        mathml = convert(latex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - the converter raises many kinds on LaTeX it does not know
        return None
    # A thin space after log, exp, ... as LaTeX sets it (the converter leaves none).
    mathml = _FUNCTION.sub(r'\1<mspace width="0.167em"></mspace>', mathml)
    tags = {tag.lower() for tag in _TAG.findall(mathml)}
    if not tags <= _MATHML_TAGS or re.search(r"\son\w+\s*=|javascript:", mathml, re.IGNORECASE):
        return None
    return mathml


class Formulas:
    """The MathML of one export, held out of the Markdown renderer: :meth:`hold` gives a
    placeholder for a formula, :meth:`restore` puts each formula where its placeholder is
    in the exported HTML (inside a tag, such as a heading's ``id``, its text instead)."""

    def __init__(self) -> None:
        # A random mark per export, so no text of the notebook can pose as a placeholder.
        self.mark = f"bayesflowformula{secrets.token_hex(6)}n"
        self.mathml: list[str] = []
        self._pattern = re.compile(rf"<[^<>]*>|{self.mark}(\d+)e")

    def hold(self, mathml: str) -> str:
        """The placeholder (letters and digits only) that stands for ``mathml``."""
        self.mathml.append(mathml)
        return f"{self.mark}{len(self.mathml) - 1}e"

    def restore(self, page: str) -> str:
        """``page`` with each placeholder replaced by its MathML."""
        def text(index: str) -> str:
            return html.escape(html.unescape(re.sub(r"<[^>]*>", "", self.mathml[int(index)])))

        def replace(match: re.Match[str]) -> str:
            if match.group(1) is not None:
                return self.mathml[int(match.group(1))]
            return re.sub(rf"{self.mark}(\d+)e", lambda inner: text(inner.group(1)), match.group(0))

        return self._pattern.sub(replace, page)


def markdown_with_mathml(text: str, formulas: Formulas | None = None) -> str:
    """Markdown with each ``$...$`` and ``$$...$$`` outside code replaced by MathML, or
    with ``formulas``, by a placeholder that :meth:`Formulas.restore` turns into MathML."""

    def convert(match: re.Match[str]) -> str:
        display = match.group(1) is not None
        mathml = latex_to_mathml(match.group(1) if display else match.group(2), display)
        if mathml is None:
            return match.group(0)
        return mathml if formulas is None else formulas.hold(mathml)

    pieces, last = [], 0
    for code in _CODE.finditer(text):
        pieces.append(_MATH.sub(convert, text[last:code.start()]))
        pieces.append(code.group(0))
        last = code.end()
    pieces.append(_MATH.sub(convert, text[last:]))
    return "".join(pieces)


def with_mathml(notebook: Any, formulas: Formulas | None = None) -> Any:
    """A copy of an executed notebook whose Markdown cells and ``text/markdown`` outputs
    hold MathML instead of LaTeX (the notebook itself keeps its LaTeX); with ``formulas``,
    placeholders for it, to restore in the HTML exported from the copy."""
    converted = copy.deepcopy(notebook)
    for cell in converted.cells:
        if cell.cell_type == "markdown":
            cell.source = markdown_with_mathml(cell.source, formulas)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/markdown" in data:
                source = data["text/markdown"]
                text = "".join(source) if isinstance(source, list) else source
                data["text/markdown"] = markdown_with_mathml(text, formulas)
    return converted


def html_exporter(*, show_code: bool) -> Any:
    """nbconvert's ``HTMLExporter`` for a report page: the offline template, no prompts,
    code cells' input hidden unless ``show_code``, images embedded as data URIs."""
    from nbconvert import HTMLExporter

    return HTMLExporter(
        template_name="lab",
        **exporter_options(),
        exclude_input=not show_code,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        # Markdown images (attachments, local files) become data URIs too; output
        # images already are: nbconvert inlines image/png outputs as base64.
        embed_images=True,
    )


def prepare_export() -> threading.Thread:
    """Load nbconvert's templates and MathML converter in a thread while the kernel runs
    the notebook in its own process (the imports happen first, in the calling thread);
    join it before exporting. A failure here is left to the export itself to raise."""

    # Every package the export and papermill's execution share is imported here, in the
    # calling thread, before the thread starts: two threads importing the same modules at
    # once can see one half-initialised ("cannot import name 'NotebookClient' from
    # 'nbclient'", seen once in the test suite). The thread then only loads templates.
    with contextlib.suppress(Exception):
        import nbconvert  # noqa: F401
        import nbformat  # noqa: F401
        import papermill  # noqa: F401

    def prepare() -> None:
        with contextlib.suppress(Exception):
            import nbformat

            html_exporter(show_code=False).from_notebook_node(nbformat.v4.new_notebook())
            latex_to_mathml("x")

    thread = threading.Thread(target=prepare, name="bayesflow-report-export", daemon=True)
    thread.start()
    return thread
