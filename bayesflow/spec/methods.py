"""Pydantic models of the inference methods a spec can name (torch-free).

Each model is the configuration language of one engine: its hyper-parameters, their
defaults and their descriptions (which ``bayesflow schema`` exports). The engine
registry (:mod:`bayesflow.engines`) implements one builder per ``engine`` value here;
a test checks that the two lists agree.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

__all__ = [
    "ENGINE_SPECS",
    "LaplaceSpec",
    "MethodSpec",
    "OptimizeSpec",
    "OptimizerSpec",
    "SGHMCSpec",
    "ScheduleSpec",
    "VISpec",
]


class Strict(BaseModel):
    """Base of every spec model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ScheduleSpec(Strict):
    """A learning-rate schedule over update steps."""

    kind: Literal["constant", "cosine", "linear", "exponential"] = Field(
        "constant", description="Shape of the schedule."
    )
    final_fraction: float = Field(
        0.01, ge=0, le=1, description="Final learning rate as a fraction of the initial one."
    )


class OptimizerSpec(Strict):
    """A torchopt optimiser."""

    name: Literal["sgd", "adam", "adamw"] = Field("adam", description="torchopt optimiser.")
    lr: PositiveFloat = Field(1e-3, description="Learning rate.")
    momentum: float = Field(0.0, ge=0, lt=1, description="Momentum (sgd only).")
    weight_decay: float = Field(
        0.0, ge=0, description="Decoupled weight decay (adamw) or L2 (sgd, adam)."
    )
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="Learning-rate schedule.")


class MethodBase(Strict):
    """Fields shared by every method."""

    from_: str | None = Field(
        None,
        alias="from",
        description="Name of another method whose fitted posterior this one starts from "
        "(Laplace needs a MAP or MLE method).",
    )
    parameters: list[str] | None = Field(
        None,
        description="Glob patterns of parameter tensor names to infer (e.g. `['2.*']` for "
        "the last layer of an MLP); the others stay at the `from` method's values. "
        "Null infers every parameter.",
    )


class OptimizeSpec(MethodBase):
    """Maximum a posteriori (``map``) or maximum likelihood (``mle``) by optimisation."""

    engine: Literal["map", "mle"] = Field(description="Registry name of the engine.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")


class LaplaceSpec(MethodBase):
    """Laplace approximation around a MAP or MLE fit named by ``from``."""

    engine: Literal["laplace_diag_ggn"] = Field(description="Registry name of the engine.")
    batch_size: PositiveInt | None = Field(
        256, description="Minibatch size of the curvature pass; null for full batch."
    )


class VISpec(MethodBase):
    """Variational inference with a diagonal Gaussian (``vi_diag``)."""

    engine: Literal["vi_diag"] = Field(description="Registry name of the engine.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    n_samples: PositiveInt = Field(
        1, description="Monte Carlo samples of the ELBO's expectation per step."
    )
    init_log_sd: float = Field(
        -3.0, description="Initial log standard deviation of every parameter."
    )
    stick_the_landing: bool = Field(
        True, description="Drop the score term of the entropy gradient (Roeder et al., 2017)."
    )


class SGHMCSpec(MethodBase):
    """Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains."""

    engine: Literal["sghmc"] = Field(description="Registry name of the engine.")
    lr: PositiveFloat = Field(1e-2, description="Step size ε.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    burn_in: int = Field(0, ge=0, description="Update steps discarded before collecting.")
    thin: PositiveInt = Field(1, description="Keep one sample every `thin` steps after burn-in.")
    chains: PositiveInt = Field(1, description="Number of chains run at once (vectorised).")
    keep: Literal["all", "last"] = Field(
        "all",
        description="Keep every thinned sample of each chain, or only each chain's last "
        "(parallel SGHMC: the Bayesian deep ensemble).",
    )


MethodSpec = Annotated[
    Union[OptimizeSpec, LaplaceSpec, VISpec, SGHMCSpec],
    Field(discriminator="engine"),
]

ENGINE_SPECS: dict[str, type[MethodBase]] = {
    "map": OptimizeSpec,
    "mle": OptimizeSpec,
    "laplace_diag_ggn": LaplaceSpec,
    "vi_diag": VISpec,
    "sghmc": SGHMCSpec,
}
