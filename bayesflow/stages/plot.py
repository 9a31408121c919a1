"""The plot stage: one figure of the spec's ``plots``, drawn from the run's artefacts.

It reads every cell's fit and evaluation that finished (its inputs are optional: a
failed cell does not stop it, and the figure marks it), tabulates them
(:func:`~bayesflow.stages.table.results_table`) and draws the plot's metric against
temperature as a PNG. It never reads the tracking store.
"""

from __future__ import annotations

from pathlib import Path

from bayesflow.dag.plan import Stage
from bayesflow.stages.artefacts import Artefact, PlotArtefact
from bayesflow.stages.table import results_table

__all__ = ["plot"]

# The figure's size in inches and resolution: 6.5 × 4.2 in at 110 dpi is 715 × 462 px,
# legible in the report and in a browser without scaling.
FIGURE_SIZE = (6.5, 4.2)
DPI = 110


def plot(stage: Stage, upstream: dict[str, Artefact], staging: Path) -> PlotArtefact:
    """Draw ``stage.config["plot"]`` over the cells' artefacts into ``staging/<plot>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    from bayesflow.report.figures import apply_theme
    from bayesflow.report.figures import plot as draw

    name = stage.config["plot"]
    frame = results_table(stage.config["cells"], upstream, stage.config.get("missing"))
    apply_theme()
    figure, axis = pyplot.subplots(figsize=FIGURE_SIZE)
    try:
        draw(name, frame, ax=axis)
        figure.tight_layout()
        target = staging / f"{name}.png"
        figure.savefig(target, dpi=DPI, bbox_inches="tight")  # a legend beside the axes
    finally:
        pyplot.close(figure)
    return PlotArtefact(target)
