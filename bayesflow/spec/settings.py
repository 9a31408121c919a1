"""The settings of a spec beyond its model (torch-free): evaluation, plots, report,
tracking and execution."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from bayesflow.spec.prediction import Prediction
from bayesflow.spec.statements import StatementsSpec
from bayesflow.spec.strict import Strict

__all__ = [
    "PLOTS",
    "PLOT_TASKS",
    "EvaluateSpec",
    "ExecutionSpec",
    "KSDSpec",
    "ReferenceSpec",
    "ReportSpec",
    "TrackingSpec",
    "default_plots",
    "plot_problem",
]


PLOTS: tuple[str, ...] = (
    "nll_vs_temperature",
    "accuracy_vs_temperature",
    "ece_vs_temperature",
    "brier_vs_temperature",
    "rmse_vs_temperature",
    "coverage_vs_temperature",
)

PLOT_TASKS: dict[str, tuple[str, ...]] = {
    "nll_vs_temperature": ("classification", "regression"),
    "accuracy_vs_temperature": ("classification",),
    "ece_vs_temperature": ("classification",),
    "brier_vs_temperature": ("classification",),
    "rmse_vs_temperature": ("regression",),
    "coverage_vs_temperature": ("regression",),
}
"""The likelihood tasks whose evaluation logs the metric each plot draws (an energy
likelihood has no predictive, so no plot applies to it)."""


def default_plots(task: str | None, coverage: bool = True) -> list[str]:
    """The plots a spec that lists none gets: NLL and accuracy for classification; NLL,
    RMSE and (when coverage levels are evaluated) interval coverage for regression; none
    for an energy likelihood, which has no predictive to plot."""
    if task == "regression":
        return ["nll_vs_temperature", "rmse_vs_temperature"] + (
            ["coverage_vs_temperature"] if coverage else []
        )
    if task == "energy":
        return []
    return ["nll_vs_temperature", "accuracy_vs_temperature"]


def plot_problem(plots: list[str], task: str | None) -> str | None:
    """Why some of ``plots`` cannot be drawn for a likelihood of ``task``, or None when
    every one can."""
    wrong = [plot for plot in plots if task is not None and task not in PLOT_TASKS.get(plot, (task,))]
    if not wrong:
        return None
    fitting = [name for name, tasks in PLOT_TASKS.items() if task in tasks]
    if not fitting:
        return f"the {task} likelihood has no predictive to plot; set `plots: []`"
    return (
        f"{', '.join(wrong)} {'draws a metric' if len(wrong) == 1 else 'draw metrics'} that a "
        f"{task} likelihood does not log; use some of [{', '.join(fitting)}] or leave `plots` "
        "out for the task's defaults"
    )


class KSDSpec(Strict):
    """The kernelised Stein discrepancy of each posterior against its tempered target."""

    kernel: Literal["imq", "rbf"] = Field(
        "imq",
        description="Base kernel: `imq` (c = 1, β = −1/2; Gorham & Mackey, 2017) or `rbf`.",
    )
    bandwidth: PositiveFloat | Literal["median"] = Field(
        1.0,
        description="Kernel bandwidth h; a fixed number measures every method with the same "
        "kernel, `median` takes the median distance between the samples.",
    )
    max_samples: PositiveInt = Field(
        1000,
        description="Samples the KSD is computed on (O(n²) time): a sample set is thinned "
        "evenly to this many, a Gaussian posterior is sampled this many times.",
    )


class ReferenceSpec(Strict):
    """What every fit is compared with: another method of the run, or a file of reference
    class probabilities. Exactly one of `method` and `file`."""

    method: str | None = Field(
        None,
        description="The reference method (e.g. a long `nuts` run; `reference: nuts` is short "
        "for `reference: {method: nuts}`). Each fit is compared "
        "with its fit of the same seed, at the same temperature or at `temperature`: "
        "`reference_mean_error` and `reference_variance_error` (posterior moments), and "
        "`agreement` and `total_variation` (classification) or `wasserstein_2` "
        "(regression) of the predictive.",
    )
    temperature: PositiveFloat | None = Field(
        None,
        description="With `method`: compare every fit with the reference fitted at this "
        "temperature, one of `temperatures` (e.g. 1, the Bayes posterior); null: at each "
        "fit's own temperature.",
    )
    file: str | None = Field(
        None,
        description="A CSV file of reference class probabilities (relative to the spec's "
        "folder): one row per test point in the test set's order (per training point when "
        "`data.test_fraction` is 0), one column per class (2 for `bernoulli`), each row "
        "summing to 1, an optional header row. Each fit logs `agreement` and "
        "`total_variation` against it.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ReferenceSpec:
        if (self.method is None) == (self.file is None):
            raise ValueError("give exactly one of `method` (a method of the run) and `file` "
                             "(a CSV file of reference class probabilities)")
        if self.file is not None and self.temperature is not None:
            raise ValueError("`temperature` goes with `method`; a file holds one set of "
                             "probabilities, drop `temperature`")
        return self


class EvaluateSpec(Strict):
    """How fitted posteriors are evaluated on the test set."""

    n_samples: PositiveInt = Field(
        50, description="Posterior samples drawn for the predictive (50 in the posteriors paper)."
    )
    ece_bins: PositiveInt = Field(10, description="Confidence bins of the ECE.")
    ece_binning: Literal["equal_width", "equal_mass"] = Field(
        "equal_width",
        description="ECE bins of equal width in confidence (Guo et al., 2017) or holding "
        "equally many test points.",
    )
    coverage_levels: list[float] = Field(
        [0.5, 0.9, 0.95],
        description="Regression: central predictive interval levels whose coverage is reported.",
    )
    prediction: Prediction = Field(
        "sampled",
        description="Gaussian posteriors (Laplace, VI): predict with sampled parameters, or "
        "with the model linearised around the mean (the GLM predictive: `linearized` with "
        "sampled parameters, so it samples too; `closed_form` without samples, the probit "
        "approximation for classification and the exact Gaussian N(f, J Sigma J^T + "
        "noise_sd^2) for a Gaussian regression; `linearized_mc` with sampled outputs; see a "
        "Laplace method's `prediction`). A method's own `prediction` other than `sampled` "
        "wins. Sample-based posteriors always use their samples. `linearized_probit` is the "
        "former name of `closed_form`, still accepted and read as it.",
    )
    prior_predictive: bool = Field(
        False,
        description="Add a prior predictive check (Wenzel et al., 2020, Section 5): the class "
        "probabilities that draws from the prior give the test inputs.",
    )
    prior_draws: PositiveInt = Field(100, description="Prior draws of the prior predictive check.")
    diagnostics: bool = Field(
        True,
        description="Samplers: log kinetic and configurational temperature of the final "
        "state, and split R-hat / ESS across chains.",
    )
    ksd: KSDSpec | None = Field(
        None,
        description="Log `ksd`, the kernelised Stein discrepancy of each fit's posterior "
        "samples against the score of the full-batch tempered log posterior (the "
        "posteriors paper, Table 3), e.g. `{kernel: imq, bandwidth: 1.0}`. Null: off. "
        "Skipped for fits at T = 0, whose target is a point.",
    )
    reference: ReferenceSpec | None = Field(
        None,
        description="What every fit is compared with: `{method: nuts}` (a method of the "
        "run; `reference: nuts` is short for it) or `{file: probs.csv}` (reference class "
        "probabilities); docs/metrics.md, \"Against a reference\". Null: none.",
    )
    statements: StatementsSpec | None = Field(
        None,
        description="A causal language model's last-word evaluation on statements, in "
        "distribution and out of it (`statements_*` metrics; docs/llm.md), e.g. "
        "`{in_distribution: package:lm/statements/science.txt, ood: cipher}`. Null: off.",
    )

    @field_validator("reference", mode="before", json_schema_input_type=str | ReferenceSpec | None)
    @classmethod
    def _method_name(cls, value: Any) -> Any:
        """``reference: nuts`` is ``reference: {method: nuts}``."""
        return {"method": value} if isinstance(value, str) else value


class ReportSpec(Strict):
    """The notebook report rendered after the fits."""

    enabled: bool = Field(True, description="Render the report.")
    template: str = Field(
        "cold_posterior",
        description="Report notebook: the name of a shipped template (`cold_posterior`, "
        "`pima_logistic`, ...; the package's `templates/`), of one in `./templates/`, or a "
        "path to your own `.py` notebook (jupytext percent format), which runs as your code.",
    )
    output_dir: str = Field("reports", description="Folder of generated reports.")


class TrackingSpec(Strict):
    """Where runs are tracked."""

    uri: str | None = Field(
        None,
        description="MLflow tracking URI; a relative SQLite path is taken from the "
        "working directory. Null uses the `MLFLOW_TRACKING_URI` environment variable when "
        "it is set, else `sqlite:///mlflow.db`.",
    )
    experiment: str | None = Field(None, description="MLflow experiment; defaults to the workflow name.")


class ExecutionSpec(Strict):
    """How stages are executed."""

    device: Literal["auto", "cpu", "cuda"] = Field("cpu", description="Torch device of the fits.")
    executor: Literal["local", "ray"] = Field(
        "local",
        description="`local`: this machine, with `workers` processes; `ray`: Ray tasks on a "
        "local Ray instance or the cluster at `address` (extra `bayesflow-workflows[ray]`).",
    )
    workers: PositiveInt = Field(
        1,
        description="Stages run at once. With more than one, fit and evaluate stages run in "
        "separate processes (or Ray tasks) while this process alone writes to MLflow.",
    )
    address: str | None = Field(
        None,
        description="Ray cluster address: `HOST:PORT` of the head (the driver on a cluster node), "
        "`auto` inside a Ray job, or `ray://HOST:10001` (Ray Client); null starts a local Ray. "
        "See docs/distributed.md.",
    )
    resources: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Ray resources per method name or stage kind, e.g. "
        "`{sghmc: {num_cpus: 2, num_gpus: 1}}`; a name other than num_cpus, num_gpus and "
        "memory is a custom resource of the nodes.",
    )
    cache_dir: str = Field(
        ".bayesflow/cache", description="Folder of finished stage outputs (reused by reruns)."
    )
    threads: PositiveInt | None = Field(
        1,
        description="Torch intra-op CPU threads per worker; null leaves torch's default. "
        "Small models step fastest on one thread (measured on a busy 2-core machine: "
        "VI 1.6 ms per step on one thread against 13 ms on two).",
    )
    keep_going: bool = Field(
        True, description="Keep running independent stages after a stage fails."
    )
    vectorize: bool = Field(
        False,
        description="Run the temperature × seed grid of each method that vectorises over "
        "temperatures (the SG-MCMC samplers; `bayesflow engines` lists them) as one batched "
        "program: every cell's chains in one "
        "vmapped engine, each chain at its own temperature, so a grid on a small model costs "
        "about one fit. Each cell still gets its own fit stage, MLflow run (param "
        "`vectorized: true`) and evaluation. Its chains start where the one-by-one fit's do "
        "(the cell's seed); the noise and the minibatch order come from one stream shared by "
        "the grid, so results equal the one-by-one fits in distribution, not bit for bit. "
        "Methods with `from` or `parameters` are fitted one by one.",
    )
