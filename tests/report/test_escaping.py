"""User strings reach the report as text, never as HTML that runs."""

from __future__ import annotations

from bayesflow.report.sections import header


def test_a_script_in_the_description_is_shown_not_run() -> None:
    """`<script>` in the spec's description is escaped in the report's header cell."""
    spec_yaml = "name: w\ndescription: 'Hello <script>alert(1)</script> & <b>bold</b>'\n"
    text = header("w", spec_yaml)
    assert "<script>" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in text


def test_header_shows_where_the_report_was_made_escaped() -> None:
    """Version, short commit, date, machine and device appear, with markup escaped."""
    from bayesflow.report.sections import header

    info = {"version": "0.1.0", "commit": "0123456789abcdef", "rendered": "2026-01-02 03:04 UTC",
            "machine": "box<i>1</i> (2 CPUs)", "device": "cuda:NVIDIA H100"}
    text = header("w", "name: w\n", info)
    assert "bayesflow 0.1.0 (commit `0123456789ab`)" in text
    assert "rendered 2026-01-02 03:04 UTC" in text and "`cuda:NVIDIA H100`" in text
    assert "box&lt;i&gt;1&lt;/i&gt; (2 CPUs)" in text and "<i>" not in text
    assert "no git commit" in header("w", "", {**info, "commit": ""})


def test_code_spans_cannot_be_closed_by_a_name() -> None:
    """A name holding backticks gets a longer fence, so it stays one code span."""
    from bayesflow.report.sections import code

    assert code("map") == "`map`"
    assert code("a`b") == "``a`b``"
    assert code("`x") == "`` `x ``"


def test_flag_messages_and_table_cells_are_escaped() -> None:
    """Flag messages under a table, and strings in displayed tables, never become HTML."""
    from bayesflow.report.flags import flag_table
    from bayesflow.report.sections import styled

    from .frames import with_flags

    frame = with_flags()
    text = flag_table(frame)
    assert "&lt;b&gt;hot&lt;/b&gt;" in text and "<b>hot" not in text
    assert "<code>sghmc</code> T = 0.1, seed 0</td><td>kinetic temperature</td>" in text
    table = frame.assign(method="<script>x</script>")[["method", "temperature"]].head(1)
    html = styled(table).to_html()
    assert "&lt;script&gt;" in html and "<script>" not in html


def test_a_fence_in_the_spec_cannot_end_its_code_block() -> None:
    """A description holding ``` gets a longer fence: the rest stays inside the block."""
    from bayesflow.report.sections import spec_block

    text = spec_block("description: |\n  ```\n  <script>alert(1)</script>\n")
    assert text.startswith("````yaml\n") and text.endswith("\n````")
