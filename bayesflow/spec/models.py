"""Pydantic models of a workflow spec (torch-free).

A spec declares the data, model, likelihood, prior, a grid of temperatures and seeds, the
inference methods and what to evaluate, plot, report, track and how to execute. Every
model forbids unknown keys. Building blocks are discriminated by ``name`` (methods by
``engine``), so each has its own fields, defaults and descriptions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from bayesflow.spec.methods import (
    LAPLACE_ENGINES,
    POSITIVE_TEMPERATURE_ENGINES,
    MethodSpec,
    Strict,
)

__all__ = [
    "DataSpec",
    "EvaluateSpec",
    "ExecutionSpec",
    "LikelihoodSpec",
    "ModelSpec",
    "PriorSpec",
    "ReportSpec",
    "TrackingSpec",
    "WorkflowSpec",
    "PLOTS",
]

# ----------------------------------------------------------------------------- data


class SklearnDigitsSpec(Strict):
    """scikit-learn's 8×8 digits (1,797 images, 10 classes), shipped with scikit-learn."""

    name: Literal["sklearn_digits"] = Field(description="Registry name of the dataset.")
    test_fraction: float = Field(0.5, gt=0, lt=1, description="Share of points held out for testing.")
    split_seed: int = Field(0, description="Seed of the stratified train/test split.")
    standardize: bool = Field(True, description="Scale pixel values to [0, 1].")
    holdout_classes: list[int] = Field(
        [],
        description="Digits removed from training and testing; their images become the "
        "out-of-distribution inputs of the evaluation (OOD AUROC of total and epistemic "
        "uncertainty).",
    )

    @field_validator("holdout_classes")
    @classmethod
    def _known_digits(cls, classes: list[int]) -> list[int]:
        unknown = sorted({c for c in classes if not 0 <= c <= 9})
        if unknown:
            raise ValueError(f"holdout_classes must be digits 0-9; got {unknown}")
        if len(set(classes)) > 8:
            raise ValueError("holdout_classes must leave at least two classes to train on")
        return classes


class CsvSpec(Strict):
    """A CSV file with a header row: numeric feature columns and one target column."""

    name: Literal["csv"] = Field(description="Registry name of the dataset.")
    path: str = Field(
        description="Path of the CSV file (relative to the spec file), or `package:NAME` "
        "for a file shipped with bayesflow (e.g. `package:pima_indians_diabetes.csv`)."
    )
    target: str = Field(description="Name of the target column.")
    test_fraction: float = Field(0.25, gt=0, lt=1, description="Share of rows held out for testing.")
    split_seed: int = Field(0, description="Seed of the train/test split.")
    standardize: bool = Field(True, description="Standardise features with training statistics.")


DataSpec = Annotated[Union[SklearnDigitsSpec, CsvSpec], Field(discriminator="name")]

# ---------------------------------------------------------------------------- model


class MLPSpec(Strict):
    """A multi-layer perceptron."""

    name: Literal["mlp"] = Field(description="Registry name of the model.")
    hidden: list[PositiveInt] = Field([64], description="Widths of the hidden layers.")
    activation: Literal["relu", "tanh", "gelu"] = Field("relu", description="Hidden activation.")


class LinearSpec(Strict):
    """A linear map from features to outputs (linear regression with `gaussian`)."""

    name: Literal["linear"] = Field(description="Registry name of the model.")
    bias: bool = Field(True, description="Include an intercept.")


class LogisticSpec(Strict):
    """Logistic regression: one linear output read as a logit (use with `bernoulli`)."""

    name: Literal["logistic"] = Field(description="Registry name of the model.")
    bias: bool = Field(True, description="Include an intercept.")


class CNNSpec(Strict):
    """A small convolutional network for images given as flat features: conv-ReLU-max-pool
    blocks and a linear head named `fc`."""

    name: Literal["cnn"] = Field(description="Registry name of the model.")
    image_shape: list[PositiveInt] | None = Field(
        None,
        min_length=3,
        max_length=3,
        description="[C, H, W] of one image; each row of features is reshaped to it. Null "
        "infers one square channel (64 features: 1×8×8 digits; 784: 1×28×28).",
    )
    channels: list[PositiveInt] = Field(
        [16, 32],
        min_length=1,
        description="Output channels of each conv-ReLU-max-pool block; each block halves "
        "the height and width.",
    )
    kernel_size: PositiveInt = Field(
        3, description="Side of every convolution kernel ('same' padding)."
    )


class CNNLSTMSpec(Strict):
    """The CNN-LSTM text classifier of the cold-posterior IMDB experiments (Wenzel et al.,
    2020; posteriors' IMDB example): embedding, 1-D conv, ReLU, max-pool, LSTM, linear.
    Inputs are integer token ids, one padded sequence per example."""

    name: Literal["cnn_lstm"] = Field(description="Registry name of the model.")
    vocabulary_size: PositiveInt = Field(
        20_000, description="Number of token ids; inputs must lie in [0, vocabulary_size)."
    )
    embedding_size: PositiveInt = Field(128, description="Width of the token embedding.")
    filters: PositiveInt = Field(64, description="Channels of the 1-D convolution.")
    kernel_size: PositiveInt = Field(5, description="Width of the convolution ('valid' padding).")
    pool_size: PositiveInt = Field(4, description="Width and stride of the max-pool.")
    hidden_size: PositiveInt = Field(128, description="Size of the LSTM's hidden state.")


class PythonModelSpec(Strict):
    """Your own torch module, built by a factory in your code. This runs your code.

    Every key besides `name` and `python` is passed to the factory as a keyword argument.
    """

    # The one spec model with open keys: they are the factory's own arguments.
    model_config = ConfigDict(extra="allow")

    name: Literal["python"] = Field(description="Registry name of the model.")
    python: str = Field(
        description="`package.module:factory`. bayesflow imports the module (from the working "
        "directory or the installed packages) and calls `factory(num_features=..., "
        "num_outputs=..., **the other keys of model)`: this runs your code. The factory "
        "returns a torch.nn.Module, used through torch.func.functional_call like the "
        "built-in models. The stage cache does not see edits to your module's source."
    )

    @field_validator("python")
    @classmethod
    def _target(cls, target: str) -> str:
        module, _, factory = target.partition(":")
        names = [*module.split("."), *factory.split(".")]
        if not module or not factory or not all(name.isidentifier() for name in names):
            raise ValueError(
                f"expected `package.module:factory` (e.g. `mymodels:make_net`), got {target!r}"
            )
        return target

    @model_validator(mode="after")
    def _reserved_keys(self) -> PythonModelSpec:
        reserved = sorted({"num_features", "num_outputs"} & set(self.model_extra or {}))
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)} are set from the data and passed to the factory; "
                "remove them from model"
            )
        return self


ModelSpec = Annotated[
    Union[MLPSpec, LinearSpec, LogisticSpec, CNNSpec, CNNLSTMSpec, PythonModelSpec],
    Field(discriminator="name"),
]

# ------------------------------------------------------------------------ likelihood


class CategoricalSpec(Strict):
    """Softmax categorical likelihood over the model's outputs (logits)."""

    name: Literal["categorical"] = Field(description="Registry name of the likelihood.")


class BernoulliSpec(Strict):
    """Bernoulli likelihood with the model's single output as logit."""

    name: Literal["bernoulli"] = Field(description="Registry name of the likelihood.")


class GaussianSpec(Strict):
    """Gaussian likelihood with the model's output as mean and a fixed noise sd."""

    name: Literal["gaussian"] = Field(description="Registry name of the likelihood.")
    noise_sd: PositiveFloat = Field(1.0, description="Standard deviation of the observation noise.")


LikelihoodSpec = Annotated[
    Union[CategoricalSpec, BernoulliSpec, GaussianSpec], Field(discriminator="name")
]

# ----------------------------------------------------------------------------- prior


class DiagNormalSpec(Strict):
    """Normal prior N(0, v) on every parameter, with one variance or one per layer."""

    name: Literal["diag_normal"] = Field(description="Registry name of the prior.")
    variance: float | dict[str, float] = Field(
        1.0,
        description="Prior variance of every parameter, or a mapping from glob patterns of "
        "parameter tensor names to variances, e.g. {'*.bias': 1.0, '*': 0.1}: the first "
        "pattern a tensor's name matches gives its variance; every tensor must match one "
        "and every pattern some tensor. Quote the patterns in YAML (`*` starts an alias).",
    )

    @field_validator("variance")
    @classmethod
    def _positive(cls, variance: float | dict[str, float]) -> float | dict[str, float]:
        # One check (not PositiveFloat inside the union) so a bad value is one problem.
        values = variance.values() if isinstance(variance, dict) else [variance]
        if isinstance(variance, dict) and not variance:
            raise ValueError("expected a variance or a non-empty mapping of patterns, got {}")
        bad = [value for value in values if not 0 < value < float("inf")]
        if bad:
            raise ValueError(
                f"expected positive finite variances, got {', '.join(map(str, bad))}"
            )
        return variance


class HeNormalSpec(Strict):
    """Normal prior scaled by fan-in (He et al., 2015): variance scale / fan_in for each
    weight tensor, fan_in being the product of all but its first dimension."""

    name: Literal["he_normal"] = Field(description="Registry name of the prior.")
    scale: PositiveFloat = Field(
        2.0,
        description="Numerator of the variance scale / fan_in: 2 is He's, for ReLU; 1 is LeCun's.",
    )
    bias_variance: PositiveFloat = Field(
        1.0, description="Variance of one-dimensional tensors (biases), which have no fan-in."
    )


class LaplacePriorSpec(Strict):
    """I.i.d. Laplace prior exp(−|θ|/b)/(2b) on every parameter."""

    name: Literal["laplace"] = Field(description="Registry name of the prior.")
    scale: PositiveFloat = Field(
        1.0,
        description="Scale b (variance 2b²). A Laplace approximation, which needs a prior "
        "precision and finds no curvature in this prior away from 0, uses 1/(2b²): the "
        "precision of the normal with the same variance.",
    )


class NoPriorSpec(Strict):
    """No prior (a flat prior): the log prior is zero."""

    name: Literal["none"] = Field(description="Registry name of the prior.")


PriorSpec = Annotated[
    Union[DiagNormalSpec, HeNormalSpec, LaplacePriorSpec, NoPriorSpec],
    Field(discriminator="name"),
]

# ------------------------------------------------------------------- the rest

PLOTS: tuple[str, ...] = (
    "nll_vs_temperature",
    "accuracy_vs_temperature",
    "ece_vs_temperature",
    "brier_vs_temperature",
)


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
    prediction: Literal["sampled", "linearized"] = Field(
        "sampled",
        description="Gaussian posteriors (Laplace, VI): predict with sampled parameters, or "
        "with the model linearised around the mean (the GLM predictive). Sample-based "
        "posteriors always use their samples.",
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


class ReportSpec(Strict):
    """The notebook report rendered after the fits."""

    enabled: bool = Field(True, description="Render the report.")
    template: str = Field(
        "cold_posterior", description="Notebook template under `templates/` (without extension)."
    )
    output_dir: str = Field("reports", description="Folder of generated reports.")


class TrackingSpec(Strict):
    """Where runs are tracked."""

    uri: str = Field(
        "sqlite:///mlflow.db",
        description="MLflow tracking URI; a relative SQLite path is taken from the "
        "working directory.",
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
        None, description="Ray cluster address (e.g. `ray://head:10001`); null starts a local Ray."
    )
    resources: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Ray resources per method name or stage kind, e.g. "
        "`{sghmc: {num_cpus: 2, num_gpus: 1}}`.",
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


class WorkflowSpec(Strict):
    """A bayesflow workflow."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Workflow name: letters, digits, `_`, `-`, `.`; names the MLflow experiment.",
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
        min_length=1, description="Grid of posterior temperatures T (T = 1 is Bayes, T → 0 is MAP)."
    )
    seeds: list[int] = Field([0], min_length=1, description="Random seeds; every cell runs once per seed.")
    methods: dict[str, MethodSpec] = Field(
        min_length=1, description="Inference methods by a name of your choice."
    )
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec, description="Evaluation.")
    plots: list[Literal[PLOTS]] = Field(  # type: ignore[valid-type]
        list(PLOTS[:2]), description="Figures drawn in the report."
    )
    report: ReportSpec = Field(default_factory=ReportSpec, description="The notebook report.")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, description="MLflow tracking.")
    execution: ExecutionSpec = Field(default_factory=ExecutionSpec, description="Execution.")

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, seeds: list[int]) -> list[int]:
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
        return temperatures


OPTIMIZATION_ENGINES = ("map", "mle")


def cross_check(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """Problems that span several keys, found on the raw mapping: (key path, message).

    Runs on the unvalidated data so that these are reported together with every
    per-field problem, not only once the rest of the spec is valid.
    """
    methods = data.get("methods") if isinstance(data, dict) else None
    if not isinstance(methods, dict):
        return []
    problems: list[tuple[tuple[str, ...], str]] = []
    temperatures = data.get("temperatures")
    has_zero = isinstance(temperatures, list) and any(
        isinstance(t, (int, float)) and not isinstance(t, bool) and t == 0 for t in temperatures
    )
    for name, method in methods.items():
        if not isinstance(method, dict):
            continue
        if has_zero and method.get("engine") in POSITIVE_TEMPERATURE_ENGINES:
            problems.append((("methods", name, "engine"),
                f"{method.get('engine')} samples exp(-U/T) and needs T > 0, but `temperatures` "
                "holds 0; drop 0 from the grid or use an optimiser for the T → 0 limit"))
        source, engine = method.get("from"), method.get("engine")
        if source is not None and source not in methods:
            problems.append((("methods", name, "from"),
                f"names {source!r}, which is not a method (methods: {', '.join(methods)})"))
        if method.get("parameters") is not None and source is None:
            problems.append((("methods", name, "parameters"),
                ("inferring a subset of the parameters needs `from: <a method>` whose values "
                 "fix the others; add it")))
        if engine in LAPLACE_ENGINES:
            if source is None:
                problems.append((("methods", name),
                    "a Laplace method needs `from: <a map or mle method>`; add it"))
            elif isinstance(methods.get(source), dict) and methods[source].get("engine") not in OPTIMIZATION_ENGINES:
                problems.append((("methods", name, "from"),
                    f"must name a map or mle method, got {source!r} "
                    f"(engine {methods[source].get('engine')})"))
    problems.extend(_cycles(methods))
    return problems


def _cycles(methods: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """A problem for each `from:` chain that loops back on itself (reported once)."""
    loops: dict[frozenset[str], tuple[tuple[str, ...], str]] = {}
    for start in methods:
        seen = [start]
        current = _source(methods, start)
        while current is not None and current in methods:
            if current in seen:
                cycle = seen[seen.index(current):]
                if frozenset(cycle) not in loops:
                    loop = " -> ".join([*cycle, current])
                    loops[frozenset(cycle)] = (("methods", cycle[0], "from"), f"`from` forms a cycle: {loop}")
                break
            seen.append(current)
            current = _source(methods, current)
    return list(loops.values())


def _source(methods: dict[str, Any], name: str) -> Any:
    method = methods.get(name)
    return method.get("from") if isinstance(method, dict) else None
