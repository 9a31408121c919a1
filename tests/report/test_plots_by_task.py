"""The plots a spec gets and may list depend on its likelihood's task."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.report.figures import PLOT_METRICS
from bayesflow.spec.load import load_spec
from bayesflow.spec.settings import PLOT_TASKS, PLOTS

SPEC = """\
name: by_task
data: {{name: csv, path: table.csv, target: {target}}}
model: {{name: linear}}
likelihood: {{name: {likelihood}}}
prior: {{name: diag_normal, variance: 1.0}}
temperatures: [1.0]
methods:
  map: {{engine: map, optimizer: {{name: adam, lr: 0.01}}, epochs: 2}}
"""


def _spec(folder: Path, likelihood: str, extra: str = "") -> Path:
    """A spec over a small CSV table: real-valued target `y` for `gaussian`, a 0/1 label
    for `bernoulli`; `plots` is left out unless ``extra`` sets it."""
    rows = ["a,y,label"] + [f"{i / 10:.2f},{0.3 * i + 0.1:.2f},{i % 2}" for i in range(20)]
    (folder / "table.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    target = "y" if likelihood == "gaussian" else "label"
    path = folder / "spec.yaml"
    path.write_text(SPEC.format(target=target, likelihood=likelihood) + extra, encoding="utf-8")
    return path


def test_every_plot_has_a_metric_and_tasks() -> None:
    """The spec's vocabulary of plots, the figures' metrics and the task table agree."""
    assert set(PLOTS) == set(PLOT_METRICS) == set(PLOT_TASKS)


def test_default_plots_follow_the_task(tmp_path: Path) -> None:
    """Left out, `plots` is NLL + accuracy for classification, NLL + RMSE + coverage for
    regression, and NLL + RMSE when no coverage level is evaluated."""
    assert load_spec(_spec(tmp_path, "bernoulli")).spec.plots == [
        "nll_vs_temperature", "accuracy_vs_temperature"
    ]
    assert load_spec(_spec(tmp_path, "gaussian")).spec.plots == [
        "nll_vs_temperature", "rmse_vs_temperature", "coverage_vs_temperature"
    ]
    no_levels = _spec(tmp_path, "gaussian", "evaluate: {coverage_levels: []}\n")
    assert load_spec(no_levels).spec.plots == ["nll_vs_temperature", "rmse_vs_temperature"]


def test_a_plot_the_task_cannot_draw_is_a_located_error(tmp_path: Path) -> None:
    """Accuracy on a regression spec is refused at validation, at the `plots` line, with
    the plots that would work; the same list is fine for classification."""
    plots = "plots: [nll_vs_temperature, accuracy_vs_temperature]\n"
    with pytest.raises(SpecError) as caught:
        load_spec(_spec(tmp_path, "gaussian", plots))
    message = str(caught.value)
    assert f"{tmp_path / 'spec.yaml'}:9:1: plots:" in message and "plots:" in message
    assert "accuracy_vs_temperature draws a metric" in message
    assert "rmse_vs_temperature" in message
    assert load_spec(_spec(tmp_path, "bernoulli", plots)).spec.plots[1] == "accuracy_vs_temperature"
