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

from bayesflow.methods.registry import METHODS
from bayesflow.spec.methods import MethodSpec
from bayesflow.spec.strict import Strict

__all__ = [
    "DataSpec",
    "EvaluateSpec",
    "ExecutionSpec",
    "ImdbSpec",
    "KSDSpec",
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
    episodes: int = Field(
        0,
        ge=0,
        le=10,
        description="Episodes of data that arrive in sequence for `continual` methods; 0 "
        "means none. See `episode_kind`.",
    )
    episode_kind: Literal["permuted", "classes"] = Field(
        "permuted",
        description="`permuted`: episode k shows every image with its pixels in a fixed "
        "random order of its own (episode 0 unpermuted), the same ten classes each time "
        "(domain-incremental, as permuted MNIST); `classes`: the digits split into tasks of "
        "consecutive classes ({0,1}, {2,3}, ... for 5; class-incremental).",
    )
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


class ImdbSpec(Strict):
    """IMDB movie reviews (Maas et al., 2011) as padded sequences of token ids, labelled 1
    (positive) or 0 (negative): the data of the cold-posterior CNN-LSTM experiments.

    The vocabulary is built on the training reviews only; a review becomes its last
    `max_length` word ids (Keras' `pad_sequences` convention, as in Wenzel et al., 2020 and
    the posteriors IMDB example). Use with `model: {name: cnn_lstm, vocabulary_size:
    ${data.vocab_size}}` and a `categorical` or `bernoulli` likelihood.
    """

    name: Literal["imdb"] = Field(description="Registry name of the dataset.")
    path: str = Field(
        "package:imdb",
        description="Folder holding the reviews (relative to the spec file): "
        "`imdb_train.csv.gz` and `imdb_test.csv.gz` (columns `text`, `label`; `rating`, "
        "`id` ignored), the `aclImdb` layout (`train/pos/*.txt`, `train/neg/*.txt`, "
        "`test/...`), or a Hugging Face `DatasetDict` saved with `save_to_disk`. "
        "`package:imdb` is the subset shipped with bayesflow: 2,000 training and 1,000 test "
        "reviews, balanced, each cut to its last 1,200 characters.",
    )
    source: Literal["auto", "csv", "aclimdb", "huggingface"] = Field(
        "auto",
        description="Form of the folder; `auto` detects it. `huggingface` needs the "
        "`datasets` package and never downloads.",
    )
    vocab_size: int = Field(
        20_000,
        ge=3,
        description="Token ids in all: 0 pads, 1 is every word outside the vocabulary, and "
        "2.. are the vocab_size − 2 most frequent words of the training reviews (20,000 in "
        "the papers). The model's `vocabulary_size` must be at least this.",
    )
    max_length: PositiveInt = Field(
        100, description="Token ids per review, after truncation and padding (100 in the papers)."
    )
    padding: Literal["pre", "post"] = Field(
        "pre",
        description="Where a short review is padded with id 0: `pre` before its words "
        "(Keras' default, so the LSTM ends on words), `post` after them.",
    )
    truncating: Literal["pre", "post"] = Field(
        "pre",
        description="Which words of a long review are dropped: `pre` its first ones, "
        "keeping the end (Keras' default, the papers' data), `post` its last ones.",
    )
    max_train: PositiveInt | None = Field(
        None,
        description="Keep this many training reviews, drawn stratified by label; null keeps "
        "all. The vocabulary is built on the reviews kept.",
    )
    max_test: PositiveInt | None = Field(
        None, description="Keep this many test reviews, drawn stratified by label; null keeps all."
    )
    subset_seed: int = Field(0, description="Seed of the `max_train` and `max_test` draws.")


class NoDataSpec(Strict):
    """No data: one empty pseudo-datum, so that the log posterior is the model's output
    plus the log prior. With the `energy` likelihood this samples a fixed energy such as
    the `double_well` model."""

    name: Literal["none"] = Field(description="Registry name of the dataset.")


DataSpec = Annotated[
    Union[SklearnDigitsSpec, CsvSpec, ImdbSpec, NoDataSpec], Field(discriminator="name")
]

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


class DoubleWellSpec(Strict):
    """The two-dimensional double-well log density −b(θ₁² − 1)² − θ₂²/2 as a model whose
    two parameters are the point θ and whose output is the log density (ignoring the
    inputs); use with the `energy` likelihood and `none` data. Its modes are (±1, 0)."""

    name: Literal["double_well"] = Field(description="Registry name of the model.")
    barrier: PositiveFloat = Field(
        4.0,
        description="b, the height of the barrier between the modes: at T = 1 a chain "
        "crosses it at a rate of about exp(−b/T).",
    )
    init_sd: PositiveFloat = Field(
        1.0, description="Standard deviation of the normal the starting points are drawn from."
    )


ModelSpec = Annotated[
    Union[
        MLPSpec, LinearSpec, LogisticSpec, CNNSpec, CNNLSTMSpec, PythonModelSpec, DoubleWellSpec
    ],
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


class EnergySpec(Strict):
    """The model's output is the log density itself (an energy's negative): log p(y|x,θ)
    is the output, whatever y. For sampling a fixed target such as `double_well` with
    `none` data; there is no predictive to evaluate."""

    name: Literal["energy"] = Field(description="Registry name of the likelihood.")


LikelihoodSpec = Annotated[
    Union[CategoricalSpec, BernoulliSpec, GaussianSpec, EnergySpec], Field(discriminator="name")
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
    ksd: KSDSpec | None = Field(
        None,
        description="Log `ksd`, the kernelised Stein discrepancy of each fit's posterior "
        "samples against the score of the full-batch tempered log posterior (the "
        "posteriors paper, Table 3), e.g. `{kernel: imq, bandwidth: 1.0}`. Null: off. "
        "Skipped for fits at T = 0, whose target is a point.",
    )
    reference: str | None = Field(
        None,
        description="Name of the method whose fit at the same temperature and seed is the "
        "reference posterior (e.g. a long `nuts` run): every other method's evaluation "
        "waits for it and logs `reference_mean_error` and `reference_variance_error`. "
        "Null: none.",
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
    vectorize: bool = Field(
        False,
        description="Run the temperature × seed grid of each SG-MCMC method (engines `sgld`, "
        "`sghmc`, `sgnht`, `baoa`) as one batched program: every cell's chains in one "
        "vmapped engine, each chain at its own temperature, so a grid on a small model costs "
        "about one fit. Each cell still gets its own fit stage, MLflow run (param "
        "`vectorized: true`) and evaluation. Its chains start where the one-by-one fit's do "
        "(the cell's seed); the noise and the minibatch order come from one stream shared by "
        "the grid, so results equal the one-by-one fits in distribution, not bit for bit. "
        "Methods with `from` or `parameters` are fitted one by one.",
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


def _traits(engine: Any) -> Any:
    """The traits of the method named ``engine``, or None for an unknown name (reported
    by the union's own validation)."""
    return METHODS.get(engine).traits if isinstance(engine, str) and engine in METHODS else None


def cross_check(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """Problems that span several keys, found on the raw mapping: (key path, message).

    Runs on the unvalidated data so that these are reported together with every
    per-field problem, not only once the rest of the spec is valid.
    """
    problems = _vocabulary_problems(data)
    methods = data.get("methods") if isinstance(data, dict) else None
    if not isinstance(methods, dict):
        return problems
    temperatures = data.get("temperatures")
    has_zero = isinstance(temperatures, list) and any(
        isinstance(t, (int, float)) and not isinstance(t, bool) and t == 0 for t in temperatures
    )
    dataset = data.get("data") if isinstance(data.get("data"), dict) else {}
    for name, method in methods.items():
        if not isinstance(method, dict):
            continue
        if method.get("continual") is not None and not dataset.get("episodes"):
            problems.append((("methods", name, "continual"),
                "needs data that arrive in episodes; set `data.episodes` (e.g. 5 for "
                "sklearn_digits)"))
        source, engine = method.get("from"), method.get("engine")
        traits = _traits(engine)
        if has_zero and traits is not None and traits.positive_temperature:
            problems.append((("methods", name, "engine"),
                f"{engine} samples exp(-U/T) and needs T > 0, but `temperatures` "
                "holds 0; drop 0 from the grid or use an optimiser for the T → 0 limit"))
        if source is not None and source not in methods:
            problems.append((("methods", name, "from"),
                f"names {source!r}, which is not a method (methods: {', '.join(methods)})"))
        if method.get("parameters") is not None and source is None:
            problems.append((("methods", name, "parameters"),
                ("inferring a subset of the parameters needs `from: <a method>` whose values "
                 "fix the others; add it")))
        if traits is not None and traits.needs_mode:
            problems.extend(_mode_problems(name, source, methods))
    problems.extend(_cycles(methods))
    problems.extend(_reference_problems(data.get("evaluate"), methods))
    return problems


def _mode_providers() -> list[str]:
    return [method.name for method in METHODS if method.traits.provides_mode]


def _mode_problems(
    name: str, source: Any, methods: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """A method that expands around a mode must start ``from`` a method that finds one."""
    providers = " or ".join(_mode_providers())
    if source is None:
        return [(("methods", name), f"a {methods[name].get('engine')} method needs "
                 f"`from: <a {providers} method>`; add it")]
    origin = methods.get(source)
    if not isinstance(origin, dict):
        return []
    traits = _traits(origin.get("engine"))
    if traits is None or traits.provides_mode:
        return []
    return [(("methods", name, "from"),
             f"must name a {providers} method, got {source!r} (engine {origin.get('engine')})")]


def _reference_problems(
    evaluate: Any, methods: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """``evaluate.reference`` must name a method."""
    reference = evaluate.get("reference") if isinstance(evaluate, dict) else None
    if reference is None or reference in methods:
        return []
    return [(("evaluate", "reference"),
             f"names {reference!r}, which is not a method (methods: {', '.join(methods)})")]


def _vocabulary_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """A ``cnn_lstm`` model must have an embedding row for every token id of ``imdb`` data."""
    if not isinstance(data, dict):
        return []
    dataset, model = data.get("data"), data.get("model")
    if not isinstance(dataset, dict) or not isinstance(model, dict):
        return []
    if dataset.get("name") != "imdb" or model.get("name") != "cnn_lstm":
        return []
    ids, rows = dataset.get("vocab_size", 20_000), model.get("vocabulary_size", 20_000)
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (ids, rows)):
        return []
    if rows >= ids:
        return []
    message = (
        f"is {rows}, but the data have {ids} token ids (data.vocab_size); set it to "
        "`${data.vocab_size}`"
    )
    return [(("model", "vocabulary_size"), message)]


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
