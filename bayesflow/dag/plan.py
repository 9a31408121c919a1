"""Plan a workflow spec into a DAG of stages with content-hash keys.

The plan is data: stages have names, kinds, the stages they depend on and a key, a hash
of everything that determines their result (the canonical resolved config, the data's
digest, the keys of their inputs and the versions that change results). It can be
printed and hashed before anything runs.

Temperature-free stages are planned once: under the ``posterior`` convention the mode of
``p(θ|D)^(1/T)`` does not move with T, so a ``map``/``mle`` fit is planned once per seed
(logged with temperature 0, the T → 0 end of the grid) and shared by every Laplace
temperature that starts ``from`` it.

With ``evaluate.reference`` (say a long NUTS run), the evaluation of every other method
also reads the reference method's fit and evaluation at the same temperature (or the
reference's stated one) and seed: they are inputs and their keys part of the
evaluation's key. A reference file's probabilities (their digest) are part of it too.

With ``execution.vectorize`` the temperature × seed grid of each SG-MCMC method is one
``fit_group/<method>`` stage (one batched engine run, each chain at its own temperature;
its key covers every cell). Each cell keeps its ``fit/<method>/T=../seed=..`` stage, which
reads the group and only takes its own posterior out of it, so evaluations, MLflow runs
and reports see the same cells as without vectorising.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Any

from bayesflow.dag.evaluators import active_evaluators
from bayesflow.dag.reference import reference_cell
from bayesflow.errors import SpecError
from bayesflow.methods.registry import traits_of
from bayesflow.spec.models import LABEL_DIGITS, WorkflowSpec, temperature_label
from bayesflow.spec.prediction import former_name

__all__ = [
    "Plan",
    "Stage",
    "add_summaries",
    "format_temperature",
    "plan_cells",
    "plan_workflow",
]

# Bumped when a change to bayesflow changes results, so cached stages are recomputed.
RESULTS_VERSION = "1"


def _hash(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _keyed(settings: dict[str, Any]) -> dict[str, Any]:
    """A method's or ``evaluate``'s settings as their keys hash them: ``prediction:
    closed_form`` under its former name ``linearized_probit``
    (:func:`~bayesflow.spec.prediction.former_name`), so that the rename kept the keys of
    the specs written before it."""
    if "prediction" not in settings:
        return settings
    return {**settings, "prediction": former_name(settings["prediction"])}


def format_temperature(temperature: float | None) -> str:
    """A short, stable label of a temperature for stage names (the spec refuses a grid
    whose temperatures would share one: :func:`~bayesflow.spec.models.temperature_label`)."""
    return "shared" if temperature is None else temperature_label(temperature)


@dataclass(frozen=True)
class Stage:
    """One unit of work in the plan.

    Attributes:
        name: unique and readable, e.g. ``fit/laplace/T=0.01/seed=0``.
        kind: ``fit``, ``fit_group`` (a vectorised grid), ``evaluate``, ``plot``,
            ``report`` or ``prior_predictive``.
        inputs: names of the stages whose outputs this one reads.
        key: content hash of everything that determines the result.
        method, engine, temperature, seed: the sweep coordinates (fit and evaluate);
            ``temperature`` is None for a fit shared by every temperature.
        config: the canonical config that went into the key.
        optional_inputs: the stage runs on whichever inputs finished (plots and the
            report show the failed cells); else a failed input skips it.
        variant: in a sweep, the label of the variant the stage belongs to
            (``prior.variance=0.1``); empty otherwise and for plots and the report.
        swept: in a sweep, the variant's swept keys and raw values.
    """

    name: str
    kind: str
    inputs: tuple[str, ...]
    key: str
    method: str | None = None
    engine: str | None = None
    temperature: float | None = None
    seed: int | None = None
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    optional_inputs: bool = False
    variant: str = ""
    swept: tuple[tuple[str, str], ...] = ()

    @property
    def cacheable(self) -> bool:
        """Whether finished outputs of this stage are reused by later runs (every kind)."""
        return self.kind in (
            "fit", "fit_group", "curvature", "evaluate", "prior_predictive", "plot", "report"
        )


@dataclass
class Plan:
    """The stages of one workflow in a valid execution order."""

    workflow: str
    stages: dict[str, Stage]

    def order(self) -> list[Stage]:
        """Stages in a topological order (inputs first), stable for equal specs."""
        graph = {name: stage.inputs for name, stage in self.stages.items()}
        sorter = TopologicalSorter(graph)
        return [self.stages[name] for name in sorter.static_order()]

    def of_kind(self, kind: str) -> list[Stage]:
        """The stages of one kind, in plan order."""
        return [stage for stage in self.order() if stage.kind == kind]

    @property
    def key(self) -> str:
        """A hash of the whole plan."""
        return _hash(sorted(stage.key for stage in self.stages.values()))

    def counts(self) -> dict[str, int]:
        """Number of stages of each kind."""
        counts: dict[str, int] = {}
        for stage in self.stages.values():
            counts[stage.kind] = counts.get(stage.kind, 0) + 1
        return counts


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"bayesflow_results": RESULTS_VERSION}
    for package in ("torch", "torchopt"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "missing"
    return out


def _shares_curvature(spec: WorkflowSpec, method: str) -> bool:
    """Whether a method's curvature pass can be shared by every temperature: the
    curvature at the mode does not depend on T (only T / (G + c·prior precision) does),
    when the mode itself is shared and the whole parameter vector is inferred."""
    config = spec.methods[method]
    return traits_of(config).curvature is not None and config.parameters is None


def _shares_temperature(spec: WorkflowSpec, method: str) -> bool:
    """Whether a method's fit is the same at every temperature (its traits say when)."""
    return traits_of(spec.methods[method]).shared_across_temperatures(spec.temperature_convention)


def _vectorized(spec: WorkflowSpec, method: str) -> bool:
    """Whether a method's grid runs as one ``fit_group`` stage (``execution.vectorize``).

    Methods that start ``from`` another fit or infer a subset of ``parameters`` are fitted
    one by one: their cells would start from (or fix tensors at) different fits."""
    config = spec.methods[method]
    return (
        spec.execution.vectorize
        and "temperatures" in traits_of(config).vectorizes
        and config.from_ is None
        and config.parameters is None
    )


def _same_cell(stage: Stage, temperature: float | None) -> None:
    """Refuse a second temperature under a stage name already planned: two cells would
    merge into one (the spec refuses such grids; a spec built in code may not have been
    validated)."""
    if stage.temperature != temperature:
        raise SpecError(
            f"temperatures: {stage.temperature!r} and {temperature!r} share the stage name "
            f"{stage.name!r}; give temperatures that differ within {LABEL_DIGITS} significant digits"
        )


def _fit_name(method: str, temperature: float | None, seed: int) -> str:
    return f"fit/{method}/T={format_temperature(temperature)}/seed={seed}"


def plan_workflow(
    spec: WorkflowSpec, data_digest: str, code: dict[str, str] | None = None,
    reference_digest: str | None = None,
) -> Plan:
    """Plan ``spec`` into stages: its cells (:func:`plan_cells`), then the plots and the
    report over them (:func:`add_summaries`).

    Args:
        spec: the validated workflow.
        data_digest: the digest of the loaded data (part of every fit key).
        code: digests of the code that draws: ``figures`` (part of every plot key) and
            ``report`` (the figure code and the template, part of the report key); the
            API computes them (:func:`bayesflow.report.render.source_digest`), so the
            planner never reads the report layer. Missing digests are left out of keys.
        reference_digest: the digest (:func:`bayesflow.data.reference.reference_digest`) of
            ``evaluate.reference.file`` or ``evaluate.statements``, in every evaluation's key.
    """
    stages = plan_cells(spec, data_digest, reference_digest)
    add_summaries(stages, spec, code or {}, _hash(spec.model_dump(mode="json")))
    return Plan(spec.name, stages)


def plan_cells(
    spec: WorkflowSpec, data_digest: str, reference_digest: str | None = None
) -> dict[str, Stage]:
    """The fits, curvature passes and evaluations of every method × temperature × seed
    cell of ``spec``, and its prior predictive check: every stage but plots and report
    (``reference_digest``: see :func:`plan_workflow`)."""
    base = {
        "data": data_digest,
        "model": spec.model.model_dump(mode="json"),
        "likelihood": spec.likelihood.model_dump(mode="json"),
        "prior": spec.prior.model_dump(mode="json"),
        "convention": spec.temperature_convention,
        "device": spec.execution.device,
        "versions": _versions(),
    }
    stages: dict[str, Stage] = {}

    def group_stage(method: str) -> Stage:
        """The one batched fit of every cell of a vectorised method (``fit_group/<method>``)."""
        name = f"fit_group/{method}"
        if name in stages:
            return stages[name]
        config = spec.methods[method]
        cells = [
            {"name": _fit_name(method, temperature, seed), "temperature": temperature, "seed": seed}
            for temperature in spec.temperatures
            for seed in spec.seeds
        ]
        payload = {
            **base,
            "method": _keyed(config.model_dump(mode="json", by_alias=True)),
            "cells": cells,
            "vectorized": True,
        }
        stage = Stage(name, "fit_group", (), _hash(payload), method, config.engine, config=payload)
        stages[name] = stage
        return stage

    def fit_stage(method: str, temperature: float | None, seed: int) -> Stage:
        config = spec.methods[method]
        name = _fit_name(method, temperature, seed)
        if name in stages:
            _same_cell(stages[name], temperature)
            return stages[name]
        inputs: tuple[str, ...] = ()
        source_keys: list[str] = []
        if _vectorized(spec, method):
            # The cell only takes its slice of the group's output.
            group = group_stage(method)
            payload = {
                **base,
                "method": _keyed(config.model_dump(mode="json", by_alias=True)),
                "temperature": temperature,
                "seed": seed,
                "inputs": [group.key],
                "vectorized": True,
            }
            stage = Stage(
                name, "fit", (group.name,), _hash(payload), method, config.engine, temperature,
                seed, payload,
            )
            stages[name] = stage
            return stage
        if config.from_ is not None:
            source_temperature = None if _shares_temperature(spec, config.from_) else temperature
            source = fit_stage(config.from_, source_temperature, seed)
            inputs, source_keys = (source.name,), [source.key]
            if _shares_curvature(spec, method) and source_temperature is None:
                # One curvature pass per seed; each temperature only rescales it.
                curvature = curvature_stage(method, seed, source)
                inputs, source_keys = (curvature.name,), [curvature.key]
        payload = {
            **base,
            "method": _keyed(config.model_dump(mode="json", by_alias=True)),
            "temperature": temperature,
            "seed": seed,
            "inputs": source_keys,
        }
        stage = Stage(name, "fit", inputs, _hash(payload), method, config.engine, temperature, seed, payload)
        stages[name] = stage
        return stage

    def curvature_stage(method: str, seed: int, source: Stage) -> Stage:
        name = f"curvature/{method}/seed={seed}"
        if name not in stages:
            payload = {
                **base,
                # How a method predicts does not change its curvature: a sampled and a
                # linearised Laplace of the same engine share one pass.
                "method": spec.methods[method].model_dump(
                    mode="json", by_alias=True,
                    exclude=set(traits_of(spec.methods[method]).prediction_fields),
                ),
                "seed": seed,
                "inputs": [source.key],
            }
            stages[name] = Stage(
                name, "curvature", (source.name,), _hash(payload), method,
                spec.methods[method].engine, None, seed, payload,
            )
        return stages[name]

    evaluations: dict[str, Stage] = {}

    def evaluate_stage(method: str, temperature: float | None, seed: int) -> Stage:
        """The evaluation of a cell; with a reference, it reads the reference's fit and
        evaluation (its predictive) too, or the reference file (its digest in the key)."""
        fit = fit_stage(method, temperature, seed)
        name = fit.name.replace("fit/", "evaluate/", 1)
        if name in evaluations:
            return evaluations[name]
        payload: dict[str, Any] = {"fit": fit.key, "evaluate": evaluate_config}
        inputs: tuple[str, ...] = (fit.name,)
        cell = reference_cell(spec, method, temperature)
        if cell is not None:
            reference, judge = fit_stage(*cell, seed), evaluate_stage(*cell, seed)
            payload.update(reference=reference.key, reference_evaluation=judge.key)
            inputs = (fit.name, reference.name, judge.name)
        read = spec.evaluate.reference is not None and spec.evaluate.reference.file is not None
        files = [evaluator.key for evaluator in active_evaluators(spec.evaluate) if evaluator.reads_files]
        if not files and getattr(spec.data, "shift", None):  # multiple_choice's data.shift
            files = ["shift"]
        digested = "reference_file" if read else files[0] if files else None
        if digested is not None:  # the file's probabilities, or an evaluator's files (statements), or shift sets
            if reference_digest is None:
                key = "reference.file" if read else digested
                raise ValueError(f"evaluate.{key} needs its digest (reference_digest)")
            payload[digested] = reference_digest
        evaluations[name] = Stage(name, "evaluate", inputs, _hash(payload), method, fit.engine,
                                  temperature, seed, payload)
        return evaluations[name]

    # Unset optional evaluations (ksd, reference) are left out of the key, so adding them
    # to the spec language kept the keys of earlier runs' evaluations.
    evaluate_config = _keyed(spec.evaluate.model_dump(mode="json", exclude_none=True))
    for method in spec.methods:
        shared = _shares_temperature(spec, method)
        temperatures: list[float | None] = [None] if shared else list(spec.temperatures)
        for temperature in temperatures:
            for seed in spec.seeds:
                stage = evaluate_stage(method, temperature, seed)
                stages[stage.name] = stage  # in the grid's order, references or not
    if spec.evaluate.prior_predictive:
        payload = {**base, "draws": spec.evaluate.prior_draws, "seed": spec.seeds[0]}
        stages["prior_predictive"] = Stage(
            "prior_predictive", "prior_predictive", (), _hash(payload), seed=spec.seeds[0],
            config=payload,
        )
    return stages


def _cell(stage: Stage) -> dict[str, Any]:
    """An evaluate stage as a cell of a plot or report stage's config (with its variant
    and swept values in a sweep)."""
    cell: dict[str, Any] = {
        "cell": stage.name.replace("evaluate/", "fit/", 1), "evaluation": stage.name,
        "method": stage.method, "engine": stage.engine, "temperature": stage.temperature,
        "seed": stage.seed,
    }
    if stage.swept:
        cell.update(variant=stage.variant, swept=dict(stage.swept))
    return cell


def add_summaries(stages: dict[str, Stage], spec: WorkflowSpec, code: dict[str, str], spec_digest: str) -> None:
    """Add the plots and the report of ``spec`` over every cell in ``stages`` (in place).

    Their inputs are optional (they read whichever cells finished); their keys cover
    those inputs' keys by name (two methods with equal settings are two cells), the figure
    code or template (``code``), the versions and, for the report, ``spec_digest`` (the
    report shows the whole spec).
    """
    cells = [_cell(stage) for stage in stages.values() if stage.kind == "evaluate"]
    results = tuple(str(name) for cell in cells for name in (cell["cell"], cell["evaluation"]))
    keys = {name: stages[name].key for name in results}
    plot_names = []
    for plot in spec.plots:
        name = f"plot/{plot}"
        payload = {"plot": plot, "code": code.get("figures", ""), "cells": cells, "inputs": keys,
                   "versions": _versions()}
        stages[name] = Stage(name, "plot", results, _hash(payload), config=payload, optional_inputs=True)
        plot_names.append(name)
    extra = tuple(name for name, stage in stages.items() if stage.kind == "prior_predictive")
    if spec.report.enabled:
        inputs = (*results, *plot_names, *extra)
        payload = {
            "report": spec.report.model_dump(mode="json"), "code": code.get("report", ""),
            "spec": spec_digest, "cells": cells,
            "inputs": {name: stages[name].key for name in inputs}, "versions": _versions(),
        }
        stages["report"] = Stage(
            "report", "report", inputs, _hash(payload), config=payload, optional_inputs=True
        )
