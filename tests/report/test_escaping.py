"""User strings reach the report as text, never as HTML that runs."""

from __future__ import annotations

from bayesflow.report.sections import header


def test_a_script_in_the_description_is_shown_not_run() -> None:
    """`<script>` in the spec's description is escaped in the report's header cell."""
    spec_yaml = "name: w\ndescription: 'Hello <script>alert(1)</script> & <b>bold</b>'\n"
    text = header("w", spec_yaml)
    assert "<script>" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in text
