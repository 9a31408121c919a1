"""Stages: one module per kind, each taking its typed upstream artefacts and returning one.

=================  ==========================================  ===========================
kind               module                                      artefact
=================  ==========================================  ===========================
fit                :mod:`~bayesflow.stages.fit`                 FitArtefact
fit_group          :mod:`~bayesflow.stages.fit_group`           FitGroupArtefact
curvature          :mod:`~bayesflow.stages.curvature`           CurvatureArtefact
evaluate           :mod:`~bayesflow.stages.evaluate`            EvaluationArtefact
prior_predictive   :mod:`~bayesflow.stages.prior_predictive`    PriorPredictiveArtefact
plot               :mod:`~bayesflow.stages.plot`                PlotArtefact
report             :mod:`~bayesflow.stages.report`              ReportArtefact
=================  ==========================================  ===========================

:class:`StageRunner` is the ``run_stage(stage, inputs, staging) -> values`` function the
scheduler calls: it reads the input cache entries as artefacts
(:mod:`~bayesflow.stages.artefacts`), calls the stage kind's function with what every
stage of the workflow shares (:class:`~bayesflow.stages.context.WorkflowContext`), and
returns the artefact's values for the cache. Stages write files only into the staging
folder they are given and never talk to the tracking store: the tracking hook
(:mod:`bayesflow.tracking.hook`) logs their artefacts after they exist. See
``docs/design.md`` ("Stages and artefacts").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Entry
from bayesflow.dag.plan import Stage
from bayesflow.data import Dataset
from bayesflow.spec.load import LoadedSpec
from bayesflow.stages.artefacts import (
    CURVATURE_FILE,
    EVALUATION_FILE,
    POSTERIOR_FILE,
    PRIOR_PREDICTIVE_FILE,
    Artefact,
    EvaluationArtefact,
    FitArtefact,
    read,
    read_inputs,
)
from bayesflow.stages.context import WorkflowContext, describe_cell, describe_error

__all__ = [
    "CURVATURE_FILE",
    "EVALUATION_FILE",
    "POSTERIOR_FILE",
    "PRIOR_PREDICTIVE_FILE",
    "StageRunner",
    "WorkflowContext",
    "compute",
    "describe_cell",
    "describe_error",
    "read",
]


def compute(
    context: WorkflowContext, stage: Stage, upstream: dict[str, Artefact], staging: Path
) -> Artefact:
    """Compute ``stage`` from its upstream artefacts into ``staging``; return its artefact.

    Raises:
        ValueError: a stage kind no module computes.
    """
    from bayesflow.stages import curvature, evaluate, fit, fit_group, plot, prior_predictive, report

    kind = stage.kind
    if kind == "fit":
        return fit.fit(context, stage, upstream, staging)
    if kind == "fit_group":
        return fit_group.fit_group(context, stage, staging)
    if kind == "curvature":
        (mode,) = upstream.values()
        assert isinstance(mode, FitArtefact)  # the planner gives a curvature pass its mode
        return curvature.curvature(context, stage, mode, staging)
    if kind == "evaluate":
        # Its fit, and with evaluate.reference the reference method's fit and evaluation.
        fit_name = stage.name.replace("evaluate/", "fit/", 1)
        fitted = upstream[fit_name]
        reference = next((a for name, a in upstream.items() if name != fit_name and isinstance(a, FitArtefact)), None)
        judged = next((a for a in upstream.values() if isinstance(a, EvaluationArtefact)), None)
        assert isinstance(fitted, FitArtefact)
        return evaluate.evaluate(context, stage, fitted, reference, staging, judged)
    if kind == "prior_predictive":
        return prior_predictive.prior_predictive(context, stage, staging)
    if kind == "plot":
        return plot.plot(stage, upstream, staging)
    if kind == "report":
        return report.report(context, stage, upstream, staging)
    raise ValueError(f"stage {stage.name}: no module computes stages of kind {kind!r}")


@dataclass
class StageRunner:
    """Computes the stages of one workflow (the scheduler's ``run_stage``).

    Attributes:
        loaded: the validated spec.
        dataset: the loaded data.
    """

    loaded: LoadedSpec
    dataset: Dataset
    context: WorkflowContext = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.context = WorkflowContext(self.loaded, self.dataset)

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Compute ``stage`` from its input entries into ``staging``; return its values.

        Raises:
            StageError: the code the stage ran (a ``python:`` model's forward) called
                ``sys.exit``, which would otherwise end the whole run quietly.
        """
        try:
            return compute(self.context, stage, read_inputs(inputs), staging).values()
        except SystemExit as error:
            from bayesflow.errors import StageError
            from bayesflow.user_code import user_frame

            where = user_frame(error)
            raise StageError(
                f"the code it ran called sys.exit({str(repr(error.code))[:80]})"
                + (f" at {where}" if where else "")
                + "; a model's forward must return (or raise), not end the program: remove the call"
            ) from error
