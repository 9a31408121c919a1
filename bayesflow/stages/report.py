"""The report stage: the spec's report template executed over a bundle of the run's results.

It writes a bundle (:mod:`bayesflow.report.bundle`) from every cell's fit and evaluation
that finished (the others listed with their status and error) and the prior predictive
check, then renders the template with papermill and nbconvert into ``report.ipynb`` and
one self-contained ``report.html``. Nothing in it names the MLflow run: the same inputs
give the same report, so it is cached like any stage, and the run's report folder is
filled by copying it (:mod:`bayesflow.report.folder`).
"""

from __future__ import annotations

from pathlib import Path

from bayesflow.dag.plan import Stage
from bayesflow.spec.load import LoadedSpec
from bayesflow.stages.artefacts import (
    BUNDLE_FOLDER,
    Artefact,
    PriorPredictiveArtefact,
    ReportArtefact,
)
from bayesflow.stages.context import WorkflowContext
from bayesflow.stages.table import cell_files, histories_of, results_table

__all__ = ["report", "report_parameters", "resolved_device", "run_environment"]


def report(
    context: WorkflowContext, stage: Stage, upstream: dict[str, Artefact], staging: Path
) -> ReportArtefact:
    """Write the bundle into ``staging/bundle`` and render the report into ``staging``."""
    from bayesflow.report import bundle
    from bayesflow.report.render import render_report

    cells = stage.config["cells"]
    posteriors, evaluations = cell_files(cells, upstream)
    check = next((a for a in upstream.values() if isinstance(a, PriorPredictiveArtefact)), None)
    folder = bundle.write(
        staging / BUNDLE_FOLDER,
        results_table(cells, upstream, stage.config.get("missing")),
        histories_of(cells, upstream),
        posteriors,
        evaluations,
        None if check is None else check.file,
    )
    rendered = render_report(
        context.spec.report.template, report_parameters(context.loaded, folder), staging
    )
    return ReportArtefact(rendered.notebook, rendered.html, folder)


def report_parameters(loaded: LoadedSpec, folder: Path) -> dict[str, object]:
    """The papermill parameters every report template takes: the ``bundle`` folder, the
    ``workflow`` name, the resolved ``spec_yaml``, the ``plots``, the ``tracking_uri``
    the runs are logged to (as the spec writes it) and ``run_info``
    (:func:`run_environment`), which the header shows."""
    spec = loaded.spec
    return {
        "bundle": str(folder),
        "workflow": spec.name,
        "spec_yaml": loaded.to_yaml(),
        "plots": list(spec.plots),
        "tracking_uri": spec.tracking.uri or "",
        "run_info": run_environment(spec.execution.device),
    }


def run_environment(device: str) -> dict[str, str]:
    """What produced the report: the bayesflow version and git commit (the tags every
    MLflow run carries, :func:`~bayesflow.tracking.hook.process_tags`), when it was
    rendered (UTC), the machine (host, CPU count, platform, Python) and the torch device
    ``execution.device`` resolves to here (``cpu`` or ``cuda:<GPU name>``)."""
    import os
    import platform
    import socket
    from datetime import datetime, timezone

    from bayesflow.tracking.hook import process_tags

    tags = process_tags()
    return {
        "version": tags.get("bayesflow.version", "unknown"),
        "commit": tags.get("mlflow.source.git.commit", ""),
        "rendered": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{socket.gethostname()} ({os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()})",
        "device": resolved_device(device),
    }


def resolved_device(device: str) -> str:
    """``cpu``, or ``cuda:<name of GPU 0>`` when ``device`` (``auto`` or ``cuda``) uses one."""
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)}"
    return "cpu" if device == "auto" else "cuda (no CUDA device on the machine that rendered this)"
