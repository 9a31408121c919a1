"""The building blocks a spec names (torch-free): data, model, likelihood and prior.

Each block is a discriminated union on ``name``, so every member has its own fields,
defaults and descriptions; the registries of :mod:`bayesflow.data`, :mod:`bayesflow.models`,
:mod:`bayesflow.likelihoods` and :mod:`bayesflow.priors` build them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from bayesflow.spec.choice import MultipleChoiceLikelihoodSpec
from bayesflow.spec.datasets import DataSpec, ImdbSpec
from bayesflow.spec.llm import CausalLMSpec
from bayesflow.spec.strict import Strict

# What a dataset feeds a model (``INPUTS`` of a data spec: numeric ``features``, integer
# ``tokens``, or ``none``) and what a model can read (``ACCEPTS`` of a model spec); the
# spec's cross-key checks refuse a pair that would fail at run time.

__all__ = ["DataSpec", "ImdbSpec", "LikelihoodSpec", "ModelSpec", "PriorSpec"]

# ---------------------------------------------------------------------------- model


class MLPSpec(Strict):
    """A multi-layer perceptron."""

    name: Literal["mlp"] = Field(description="Registry name of the model.")
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"features", "tokens"})
    hidden: list[PositiveInt] = Field([64], description="Widths of the hidden layers.")
    activation: Literal["relu", "tanh", "gelu"] = Field("relu", description="Hidden activation.")


class LinearSpec(Strict):
    """A linear map from features to outputs (linear regression with `gaussian`)."""

    name: Literal["linear"] = Field(description="Registry name of the model.")
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"features", "tokens"})
    bias: bool = Field(True, description="Include an intercept.")


class LogisticSpec(Strict):
    """Logistic regression: one linear output read as a logit (use with `bernoulli`)."""

    name: Literal["logistic"] = Field(description="Registry name of the model.")
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"features", "tokens"})
    bias: bool = Field(True, description="Include an intercept.")


class CNNSpec(Strict):
    """A small convolutional network for images given as flat features: conv-ReLU-max-pool
    blocks and a linear head named `fc`."""

    name: Literal["cnn"] = Field(description="Registry name of the model.")
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"features", "tokens"})
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
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"tokens"})
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
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"features", "tokens", "none"})
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
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"none"})
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
        MLPSpec, LinearSpec, LogisticSpec, CNNSpec, CNNLSTMSpec, PythonModelSpec, DoubleWellSpec,
        CausalLMSpec,
    ],
    Field(discriminator="name"),
]

# ------------------------------------------------------------------------ likelihood


class CategoricalSpec(Strict):
    """Softmax categorical likelihood over the model's outputs (logits)."""

    name: Literal["categorical"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "classification"


class BernoulliSpec(Strict):
    """Bernoulli likelihood with the model's single output as logit."""

    name: Literal["bernoulli"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "classification"


class GaussianSpec(Strict):
    """Gaussian likelihood with the model's output as mean and a fixed noise sd."""

    name: Literal["gaussian"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "regression"
    noise_sd: PositiveFloat = Field(1.0, description="Standard deviation of the observation noise.")


class EnergySpec(Strict):
    """The model's output is the log density itself (an energy's negative): log p(y|x,θ)
    is the output, whatever y. For sampling a fixed target such as `double_well` with
    `none` data; there is no predictive to evaluate."""

    name: Literal["energy"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "energy"


class NextTokenSpec(Strict):
    """The categorical likelihood of each window's scored tokens under a causal language
    model (`causal_lm` with `text` data): every scored token is one datum, so N is
    windows × scored tokens and the temperature convention holds as for any model."""

    name: Literal["next_token"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "classification"


LikelihoodSpec = Annotated[
    Union[CategoricalSpec, BernoulliSpec, GaussianSpec, EnergySpec, NextTokenSpec, MultipleChoiceLikelihoodSpec],
    Field(discriminator="name"),
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

    @field_validator("variance", mode="before")
    @classmethod
    def _not_auto(cls, variance: Any) -> Any:
        if variance == "auto":
            raise ValueError(
                "the evidence-chosen prior variance is a setting of a Laplace method, which "
                "chooses it at its mode: write `prior_variance: auto` under that method "
                "(methods.<name>) and a number here, the prior the mode is fitted under"
            )
        return variance

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
