"""The plot and report stages: computed from the fit and evaluate artefacts, on the cells
that finished, cached like any stage, and copied into each run's report folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bayesflow
from bayesflow.report import bundle
from bayesflow.stages.artefacts import ReportArtefact
from bayesflow.tracking import InMemoryTracker
from tests.conftest import TINY_SPEC, write

pytestmark = pytest.mark.slow  # renders two Jupyter reports

DIVERGING = TINY_SPEC.replace("    lr: 0.01\n    epochs: 3\n    chains: 2", "    lr: 1.0e+6\n    epochs: 3\n    chains: 2")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InMemoryTracker, list]:
    """Two runs of the tiny workflow whose SGHMC diverges, into one in-memory tracker."""
    folder = tmp_path_factory.mktemp("diverging")
    spec = write(folder, DIVERGING)
    tracker = InMemoryTracker(folder / "artifacts")
    overrides = [f"execution.cache_dir={folder / 'cache'}", f"report.output_dir={folder / 'reports'}",
                 "temperatures=[1.0]"]
    runs = [bayesflow.run(bayesflow.load(spec, overrides), tracker=tracker) for _ in range(2)]
    return folder, tracker, runs


def test_plots_and_report_run_on_the_cells_that_finished(two_runs) -> None:
    """The diverged fit fails, its evaluation is skipped, and the plots and the report
    still run and list it as failed with its error."""
    _, _, (first, _) = two_runs
    status = first.outcome.status
    assert status["fit/sghmc/T=1/seed=0"] == "failed" and status["evaluate/sghmc/T=1/seed=0"] == "skipped"
    assert {status[name] for name in status if name.startswith(("plot/", "report"))} == {"ran"}
    report = ReportArtefact.from_entry(first.outcome.entries["report"])
    frame = bundle.open(report.bundle).results().set_index("method")
    assert frame.loc["sghmc", "status"] == "FAILED" and "diverged" in frame.loc["sghmc", "error"]
    assert (frame.loc[["map", "laplace"], "status"] == "FINISHED").all()
    assert first.exit_code == 1


def test_report_names_no_run_and_is_copied_into_the_run_folder(two_runs) -> None:
    """The cached report does not embed its run's id; each run's folder gets a copy, its
    figures beside it, and the report is logged to each parent run."""
    folder, tracker, runs = two_runs
    for result in runs:
        html = result.report_html
        assert html == folder / "reports" / "tiny" / result.run_id / "report.html" and html.exists()
        assert sorted(p.name for p in (html.parent / "figures").iterdir()) == [
            "accuracy_vs_temperature.png", "nll_vs_temperature.png"
        ]
        logged = tracker.artifact_root / result.run_id / "artifacts" / "report"
        assert sorted(p.name for p in logged.iterdir()) == ["report.html", "report.ipynb"]
        text = re.sub(r"<[^>]+>", "", html.read_text())
        assert not any(run.run_id in text for run in runs)
        assert "fit/sghmc/T=1/seed=0" in text


def test_rerun_recomputes_only_the_failing_fit(two_runs) -> None:
    """The second run reuses every stage that finished, plots and report included; only
    the diverging fit is tried again."""
    _, _, (_, second) = two_runs
    ran = {name for name, status in second.outcome.status.items() if status == "ran"}
    assert ran == set()
    assert second.outcome.status["fit/sghmc/T=1/seed=0"] == "failed"
    assert second.outcome.status["report"] == "cached"


def test_run_result_tabulates_without_the_store(two_runs) -> None:
    """RunResult.results() is the report's table, from the outcome alone."""
    _, _, (first, _) = two_runs
    frame = first.results()
    expected = bundle.open(ReportArtefact.from_entry(first.outcome.entries["report"]).bundle).results()
    assert frame.equals(expected)
