"""The pydantic model of a whole workflow spec (torch-free).

A spec declares the data, model, likelihood, prior (:mod:`bayesflow.spec.blocks`), a grid
of temperatures and seeds, the inference methods (:mod:`bayesflow.spec.methods`, one
spec class per method, owned by the method's module) and what to evaluate, plot, report,
track and how to execute (:mod:`bayesflow.spec.settings`). Every model forbids unknown
keys. Checks that span several keys are in :mod:`bayesflow.spec.relations`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, ValidationInfo, field_validator

from bayesflow.spec.blocks import DataSpec, LikelihoodSpec, ModelSpec, PriorSpec
from bayesflow.spec.methods import MethodSpec
from bayesflow.spec.settings import (
    PLOTS,
    EvaluateSpec,
    ExecutionSpec,
    ReportSpec,
    TrackingSpec,
    default_plots,
    plot_problem,
)
from bayesflow.spec.strict import Strict

__all__ = ["LABEL_DIGITS", "WorkflowSpec", "temperature_label"]

METHOD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,59}")
# Stage names, MLflow run names, the summary table and the report print a temperature to
# this many significant digits (``f"{T:g}"``): two temperatures of one grid must differ
# within them, or their cells would share a name and merge.
LABEL_DIGITS = 6


def temperature_label(temperature: float) -> str:
    """How a temperature is printed in stage names and reports (``0.1``, ``1e-07``)."""
    return f"{temperature:.{LABEL_DIGITS}g}"


def _label_collisions(temperatures: list[float]) -> list[str]:
    """One line per label that two different temperatures of the grid would share."""
    by_label: dict[str, list[int]] = {}
    for index, temperature in enumerate(temperatures):
        by_label.setdefault(temperature_label(temperature), []).append(index)
    problems = []
    for label, indices in by_label.items():
        distinct = sorted({temperatures[index] for index in indices})
        if len(distinct) < 2:
            continue  # equal values: the duplicates check names them
        shown = " and ".join(f"temperatures[{index}] = {temperatures[index]!r}" for index in indices)
        problems.append(
            f"{shown} would share the label T={label} (stage names, MLflow runs and the report "
            f"print {LABEL_DIGITS} significant digits), so their cells would merge; give "
            f"temperatures that differ within {LABEL_DIGITS} significant digits, or keep one"
        )
    return problems


class WorkflowSpec(Strict):
    """A bayesflow workflow."""

    name: str = Field(
        # The name becomes folder and file names (reports/<name>/, the cache index): it
        # must not start with `.` or `-` (no `..`, no hidden files, no options) and must
        # stay well under the usual 255-byte file-name limit.
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        max_length=100,
        description="Workflow name: letters, digits, `_`, `-`, `.`, starting with a letter, "
        "digit or `_`, at most 100 characters; names the MLflow experiment and the report "
        "folder.",
    )
    description: str = Field("", description="What the workflow studies and why.")
    data: DataSpec = Field(description="Training and test data.")
    model: ModelSpec = Field(description="The network.")
    likelihood: LikelihoodSpec = Field(description="The observation model p(y | x, θ).")
    prior: PriorSpec = Field(description="The prior p(θ).")
    temperature_convention: Literal["posterior", "likelihood"] = Field(
        "posterior",
        description="`posterior`: p(θ|D)^(1/T), likelihood and prior tempered (Wenzel et al., "
        "2020); `likelihood`: only the likelihood is tempered.",
    )
    temperatures: list[NonNegativeFloat] = Field(
        min_length=1, description="Grid of posterior temperatures T (T = 1 is Bayes, T → 0 is MAP). "
        "T = 0 is the limit: a method fitted per temperature (VI, Laplace) fits its own point mass "
        "at its mode there; samplers need T > 0; MAP, maximum likelihood and deep ensembles are "
        "that limit already, fitted once for every temperature and written `T → 0`."
    )
    seeds: list[int] = Field([0], min_length=1, description="Random seeds; every cell runs once per seed.")
    methods: dict[str, MethodSpec] = Field(
        min_length=1, description="Inference methods by a name of your choice."
    )
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec, description="Evaluation.")
    plots: list[Literal[PLOTS]] = Field(  # type: ignore[valid-type]
        None,
        validate_default=True,
        description="Figures drawn in the report, each a metric against temperature. Left "
        "out: chosen by the likelihood's task (classification: NLL and accuracy; regression: "
        "NLL, RMSE and interval coverage; energy: none). A plot of a metric the task does "
        "not log is an error.",
    )
    report: ReportSpec = Field(default_factory=ReportSpec, description="The notebook report.")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, description="MLflow tracking.")
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec, description="Execution.")

    @field_validator("plots", mode="before")
    @classmethod
    def _plots_for_task(cls, plots: Any, info: ValidationInfo) -> Any:
        likelihood, evaluate = info.data.get("likelihood"), info.data.get("evaluate")
        task = getattr(likelihood, "TASK", None)
        if plots is None:
            return default_plots(task, coverage=bool(getattr(evaluate, "coverage_levels", True)))
        names = [plot for plot in plots if isinstance(plot, str)] if isinstance(plots, list) else []
        problem = plot_problem(names, task)
        if problem:
            raise ValueError(problem)
        return plots

    @field_validator("methods")
    @classmethod
    def _method_names(cls, methods: dict[str, Any]) -> dict[str, Any]:
        # A method's name is a part of stage names (`fit/<method>/T=.../seed=...`), of
        # `--force` globs and of MLflow run names: no `/`, glob characters or spaces.
        bad = [name for name in methods if not METHOD_NAME.fullmatch(name)]
        if bad:
            raise ValueError(
                f"method name {bad[0][:60]!r} is not a plain name: expected letters, digits, "
                "`_`, `-` and `.`, starting with a letter, digit or `_`, at most 60 characters "
                "(it becomes part of stage names); rename it, e.g. `sghmc_cold`"
            )
        return methods

    @field_validator("seeds", "temperatures", mode="before")
    @classmethod
    def _no_booleans(cls, values: Any) -> Any:
        # YAML reads `yes`, `on` and `true` as True, which pydantic would take for 1.
        if isinstance(values, list) and any(isinstance(value, bool) for value in values):
            found = next(value for value in values if isinstance(value, bool))
            raise ValueError(f"expected numbers, got the boolean {str(found).lower()} (YAML reads yes, on and true as booleans, which would count as 1); write the number")
        return values

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
        outside = [seed for seed in seeds if not -(2**63) <= seed < 2**63]
        if outside:
            raise ValueError(
                f"expected seeds that fit in 64 bits (-2**63 to 2**63 - 1, what torch's generators "
                f"take), got {str(outside[0])[:30]}; use a smaller seed"
            )
        duplicates = sorted({seed for seed in seeds if seeds.count(seed) > 1})
        if duplicates:
            raise ValueError(
                f"expected unique seeds, got {', '.join(map(str, duplicates))} more than once; "
                "remove the repeats"
            )
        return seeds

    @field_validator("temperatures")
    @classmethod
    def _unique_temperatures(cls, temperatures: list[float]) -> list[float]:
        infinite = [t for t in temperatures if t == float("inf")]
        if infinite:
            raise ValueError("expected finite temperatures, got inf; T = 1 is the Bayes posterior")
        duplicates = sorted({t for t in temperatures if temperatures.count(t) > 1})
        if duplicates:
            raise ValueError(
                f"expected unique temperatures, got {', '.join(f'{t:g}' for t in duplicates)} "
                "more than once; remove the repeats"
            )
        collisions = _label_collisions(temperatures)
        if collisions:
            raise ValueError("; ".join(collisions))
        # -0.0 passes `>= 0` but would print as T=-0: one zero.
        return [abs(t) if t == 0 else t for t in temperatures]
