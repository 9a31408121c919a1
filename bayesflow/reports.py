"""Where a run's report goes, and the report of a finished run rendered again.

A run's report and figures go to ``<output_dir>/<workflow>/<run id>/``
(:func:`report_folder`), copied there from the cache once their stages finish
(:func:`fill_report_folder`); :func:`report` renders it again from what the tracking store
holds (``bayesflow report RUN_ID``), refitting nothing. :mod:`bayesflow.api` exports
:func:`report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesflow.dag.plan import Plan
from bayesflow.dag.scheduler import Outcome
from bayesflow.spec.load import load_spec
from bayesflow.tracking.read import open_tracker, run_spec

__all__ = ["fill_report_folder", "report", "report_folder"]


def report_folder(output_dir: str | Path, workflow: str, run_id: str) -> Path:
    """``<output_dir>/<workflow>/<run id>/``: where a run's report and figures go."""
    return Path(output_dir) / workflow / run_id


def fill_report_folder(the_plan: Plan, outcome: Outcome, folder: Path) -> None:
    """Copy the finished figures (``figures/<plot>.png``) and report (``report.ipynb``,
    ``report.html``) from the cache into the run's report folder."""
    import shutil

    from bayesflow.stages.artefacts import PlotArtefact, ReportArtefact

    for name, entry in outcome.entries.items():
        kind = the_plan.stages[name].kind
        if kind == "plot":
            files = [(PlotArtefact.from_entry(entry).png, folder / "figures")]
        elif kind == "report":
            rendered = ReportArtefact.from_entry(entry)
            files = [(rendered.notebook, folder), (rendered.html, folder)]
        else:
            continue
        for source, target in files:
            try:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target / source.name)
            except OSError as error:  # the work is done: say where it is, never crash
                from bayesflow.report.render import unwritable_output

                raise unwritable_output(error, target, (
                    f"every stage finished and is logged to MLflow run {folder.name}; "
                    f"{source.name} is in {source.parent}"
                )) from None


def report(
    run_id: str,
    *,
    tracking_uri: str | None = None,
    output_dir: str | Path | None = None,
    template: str | None = None,
    tracker: Any = None,
) -> Path:
    """Re-render the report of a finished ``bayesflow run`` from its stored results.

    Nothing is refitted: the spec, the fits and their arrays are read back from the
    tracking store into a report bundle (:func:`bayesflow.tracking.read.write_bundle`),
    the one a report stage writes from the run's artefacts. The report is written to
    ``<output_dir>/<workflow>/<run_id>/`` (``output_dir`` defaults to the spec's
    ``report.output_dir``) and logged to the run again.

    Returns:
        The path of the HTML report.
    """
    import tempfile

    from bayesflow.report.kernel import prestart
    from bayesflow.report.render import render_report
    from bayesflow.stages.report import report_parameters
    from bayesflow.tracking.read import write_bundle

    tracker = open_tracker(tracking_uri, tracker)
    with tempfile.TemporaryDirectory() as folder:
        spec_path = Path(folder) / "resolved.yaml"
        spec_path.write_text(run_spec(run_id, tracker=tracker))
        loaded = load_spec(spec_path)
    prestart()  # the kernel starts while the run's arrays are read back
    spec = loaded.spec
    target = report_folder(output_dir or spec.report.output_dir, spec.name, run_id)
    with tempfile.TemporaryDirectory() as folder:
        bundle = write_bundle(run_id, Path(folder) / "bundle", tracker)
        parameters = {**report_parameters(loaded, bundle), "tracking_uri": tracker.uri}
        try:
            rendered = render_report(template or spec.report.template, parameters, target)
        except OSError as error:
            # Only a write into the target (or making it) is the target's fault.
            place = target.resolve()
            named = [Path(str(name)).resolve() for name in (error.filename, error.filename2) if name]
            if not any(path.is_relative_to(place) or place.is_relative_to(path) for path in named):
                raise
            from bayesflow.report.render import unwritable_output

            raise unwritable_output(error, target, f"run {run_id} is unchanged in the store") from None
    for path in (rendered.notebook, rendered.html):
        tracker.log_artifact(run_id, path, "report")
    return rendered.html
