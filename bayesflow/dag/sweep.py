"""Plan a sweep: every variant's cells in one plan, one set of plots and one report over all.

A sweep (``bayesflow run spec.yaml -m prior.variance=0.1,1``) is a list of *variants*, each
a validated spec. Each variant is planned into its cells as a workflow of its own
(:func:`~bayesflow.dag.plan.plan_cells`); its stage names get the variant's tag as a last
part (``fit/map/T=shared/seed=0/prior.variance=0.1``) so that every variant has its own
stages, MLflow child runs and rows, and each stage carries the variant's label and swept
values. Keys are not touched: a stage whose inputs are equal in two variants (a MAP fit
when only a sampler's step size is swept) has the same key in both, and the scheduler
computes it once. The plots and the report are planned once over the cells of every
variant, from the first variant's settings (the keys a sweep cannot vary, see
:mod:`bayesflow.spec.sweep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Entry
from bayesflow.dag.executors import RunStage
from bayesflow.dag.plan import Plan, Stage, _hash, add_summaries, plan_cells
from bayesflow.spec.models import WorkflowSpec

__all__ = ["PlannedVariant", "VariantRunner", "plan_sweep"]


@dataclass(frozen=True)
class PlannedVariant:
    """What the planner needs of one variant.

    Attributes:
        tag: the suffix of its stage names, unique in the sweep and safe in a file name.
        label: its readable name, ``prior.variance=0.1 model.hidden=[32,32]``.
        swept: its swept keys and raw values.
        spec: its validated spec.
        data_digest: the digest of its data.
        reference_digest: the digest of its reference file's probabilities, if any.
    """

    tag: str
    label: str
    swept: tuple[tuple[str, str], ...]
    spec: WorkflowSpec
    data_digest: str
    reference_digest: str | None = None


def _renamed(stage: Stage, variant: PlannedVariant) -> Stage:
    suffix = f"/{variant.tag}"
    return replace(
        stage, name=stage.name + suffix, inputs=tuple(name + suffix for name in stage.inputs),
        variant=variant.label, swept=variant.swept,
    )


def plan_sweep(variants: Sequence[PlannedVariant], code: dict[str, str] | None = None) -> Plan:
    """One plan of every variant's cells, then plots and a report over all of them.

    Args:
        variants: the sweep's variants, in order (at least one).
        code: the digests of the figure code and the report template (see
            :func:`~bayesflow.dag.plan.plan_workflow`).
    """
    stages: dict[str, Stage] = {}
    for variant in variants:
        for stage in plan_cells(variant.spec, variant.data_digest, variant.reference_digest).values():
            renamed = _renamed(stage, variant)
            stages[renamed.name] = renamed
    first = variants[0].spec
    digest = _hash([variant.spec.model_dump(mode="json") for variant in variants])
    add_summaries(stages, first, code or {}, digest)
    return Plan(first.name, stages)


@dataclass
class VariantRunner:
    """Computes each stage with its variant's runner (the scheduler's ``run_stage``).

    Attributes:
        runners: a runner per variant label; a stage of no variant (plots, the report)
            goes to the first.
    """

    runners: dict[str, RunStage]

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Compute ``stage`` with the runner of its variant."""
        runner = self.runners.get(stage.variant) or next(iter(self.runners.values()))
        return runner(stage, inputs, staging)
