"""Reports: seaborn figures over a results frame, the report bundle, notebook rendering.

``bundle`` is a report's data as one folder (the results table, histories and arrays per
cell), written by the report stage from the run's artefacts or by ``bayesflow report``
from the store, and read by every template with ``bundle.open(path)``; ``render`` turns
a jupytext template into an executed notebook and one self-contained HTML file
(papermill + nbconvert); ``figures``, ``experiments``, ``sections`` and ``compare`` draw
and write what templates show. The figure functions are imported lazily, so rendering
does not pay for seaborn. Nothing here reads the tracking store.
"""

from __future__ import annotations

from typing import Any

from bayesflow.report.render import (
    KERNEL_NAME,
    RenderedReport,
    ReportError,
    find_template,
    list_templates,
    render_report,
    template_folders,
)

__all__ = [
    "KERNEL_NAME",
    "PLOT_METRICS",
    "RenderedReport",
    "ReportError",
    "apply_theme",
    "find_template",
    "list_templates",
    "metric_vs_temperature",
    "plot",
    "render_report",
    "results_table",
    "template_folders",
]

_FIGURE_NAMES = {"PLOT_METRICS", "apply_theme", "metric_vs_temperature", "plot", "results_table"}


def __getattr__(name: str) -> Any:
    if name in _FIGURE_NAMES:
        from bayesflow.report import figures

        return getattr(figures, name)
    raise AttributeError(f"module 'bayesflow.report' has no attribute {name!r}")
