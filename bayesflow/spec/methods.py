"""Pydantic models of the inference methods a spec can name (torch-free).

Each model is the configuration language of one engine: its hyper-parameters, their
defaults and their descriptions (which ``bayesflow schema`` exports). The engine
registry (:mod:`bayesflow.engines`) implements one builder per ``engine`` value here;
a test checks that the two lists agree.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

__all__ = [
    "ENGINE_SPECS",
    "LAPLACE_ENGINES",
    "POSITIVE_TEMPERATURE_ENGINES",
    "BAOASpec",
    "DeepEnsembleSpec",
    "EKFDenseSpec",
    "EKFDiagSpec",
    "LaplaceDenseFisherSpec",
    "LaplaceDenseGGNSpec",
    "LaplaceDenseHessianSpec",
    "LaplaceDiagFisherSpec",
    "LaplaceSpec",
    "MethodSpec",
    "NUTSSpec",
    "OptimizeSpec",
    "OptimizerSpec",
    "Prediction",
    "SGHMCSpec",
    "SGLDSpec",
    "SGNHTSpec",
    "SamplerScheduleSpec",
    "ScheduleSpec",
    "VIDenseSpec",
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

    @model_validator(mode="after")
    def _momentum_is_for_sgd(self) -> OptimizerSpec:
        # torchopt's adam and adamw have no momentum argument: it would be ignored silently.
        if self.momentum > 0 and self.name != "sgd":
            raise ValueError(
                f"momentum applies to sgd only, got momentum {self.momentum} with {self.name} "
                "(whose first-moment decay plays that role); remove momentum or use name: sgd"
            )
        return self


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
    continual: Literal["online", "laplace_prior", "offline"] | None = Field(
        None,
        description="With data in episodes (`data.episodes`): `online` fits each episode in "
        "turn from the previous parameters (online SGD); `laplace_prior` also makes the "
        "previous episode's diagonal GGN Laplace posterior the next episode's prior; "
        "`offline` refits on every episode seen so far. `epochs` are per episode.",
    )


class DeepEnsembleSpec(MethodBase):
    """A deep ensemble: K optimisation runs at once, the T = 0 limit of parallel SGHMC."""

    engine: Literal["deep_ensemble"] = Field(description="Registry name of the engine.")
    members: PositiveInt = Field(5, description="Number K of ensemble members (vectorised).")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimiser.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")


# ------------------------------------------------------------------- Gaussian methods

Prediction = Literal["sampled", "linearized"]
PREDICTION_DESCRIPTION = (
    "How the evaluate stage forms the predictive: `sampled` pushes parameter samples "
    "through the network; `linearized` pushes them through the network linearised "
    "around the mean (the GLM predictive of Immer et al., 2021)."
)


class LaplaceBase(MethodBase):
    """Fields shared by the Laplace approximations."""

    batch_size: PositiveInt | None = Field(
        256, description="Minibatch size of the curvature pass; null for full batch."
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class LaplaceSpec(LaplaceBase):
    """Diagonal Laplace with the generalised Gauss-Newton curvature, around `from`."""

    engine: Literal["laplace_diag_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDiagFisherSpec(LaplaceBase):
    """Diagonal Laplace with the empirical Fisher curvature, around `from`."""

    engine: Literal["laplace_diag_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseFisherSpec(LaplaceBase):
    """Dense Laplace with the empirical Fisher curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseGGNSpec(LaplaceBase):
    """Dense Laplace with the generalised Gauss-Newton curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDenseHessianSpec(LaplaceBase):
    """Dense Laplace with the exact Hessian, around `from` (small models)."""

    engine: Literal["laplace_dense_hessian"] = Field(description="Registry name of the engine.")


class VIBase(MethodBase):
    """Fields shared by the variational methods."""

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
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class VISpec(VIBase):
    """Variational inference with a diagonal Gaussian (``vi_diag``)."""

    engine: Literal["vi_diag"] = Field(description="Registry name of the engine.")


class VIDenseSpec(VIBase):
    """Variational inference with a full-covariance Gaussian (``vi_dense``, small models)."""

    engine: Literal["vi_dense"] = Field(description="Registry name of the engine.")


class EKFBase(MethodBase):
    """Fields shared by the extended Kalman filters."""

    epochs: PositiveInt = Field(
        1, description="Passes over the training data (one pass is one Bayesian update)."
    )
    batch_size: PositiveInt | None = Field(
        128, description="Minibatch size of each filter step; null for full batch."
    )
    fisher: Literal["expected", "empirical"] = Field(
        "expected",
        description="Curvature of each update: `expected` is the Fisher of the model's "
        "predictive (Ollivier, 2018; exact Kalman filtering for a linear-Gaussian model); "
        "`empirical` is Σᵢ gᵢgᵢᵀ of the per-example gradients (as the posteriors library).",
    )
    decay: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Predict step: the covariance is divided by `decay` before each update "
        "(fading memory); 1 keeps the exact Bayesian update.",
    )
    transition_variance: float = Field(
        0.0,
        ge=0,
        description="Predict step: variance q added to every parameter before each update.",
    )
    init_variance: PositiveFloat | None = Field(
        None,
        description="Initial (untempered) variance of every parameter; null uses the prior's "
        "variance, the filter's starting belief.",
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)


class EKFDiagSpec(EKFBase):
    """Online extended Kalman filter with a diagonal covariance (``ekf_diag_fisher``)."""

    engine: Literal["ekf_diag_fisher"] = Field(description="Registry name of the engine.")


class EKFDenseSpec(EKFBase):
    """Online extended Kalman filter with a dense covariance (small models)."""

    engine: Literal["ekf_dense_fisher"] = Field(description="Registry name of the engine.")


# -------------------------------------------------------------------------- samplers


class SamplerScheduleSpec(Strict):
    """A step-size schedule of an SG-MCMC sampler over its update steps."""

    kind: Literal["constant", "decaying", "cyclical"] = Field(
        "constant",
        description="`constant`: ε; `decaying`: ε·(1 + t/decay_steps)^(−power) (Welling & "
        "Teh, 2011); `cyclical`: `cycles` cosine cycles from ε down to 0 (Zhang et al., 2020).",
    )
    decay_steps: PositiveFloat = Field(
        1000.0, description="`decaying`: update steps over which the step size halves at power 1."
    )
    power: float = Field(
        0.55,
        gt=0,
        le=1,
        description="`decaying`: the exponent; Welling & Teh (2011) need 0.5 < power ≤ 1 for "
        "the decreasing-step-size convergence guarantee.",
    )
    cycles: PositiveInt = Field(4, description="`cyclical`: number of cosine cycles over the run.")
    exploration: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="`cyclical`: fraction of each cycle run without injected noise and "
        "without keeping samples (the exploration stage of Zhang et al., 2020).",
    )


class SamplerBase(MethodBase):
    """Fields shared by the SG-MCMC samplers."""

    lr: PositiveFloat = Field(1e-2, description="Step size ε (the largest one under a schedule).")
    schedule: SamplerScheduleSpec = Field(
        default_factory=SamplerScheduleSpec, description="Step-size schedule."
    )
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    burn_in: int = Field(0, ge=0, description="Update steps discarded before collecting.")
    thin: PositiveInt = Field(1, description="Keep one sample every `thin` steps after burn-in.")
    chains: PositiveInt = Field(1, description="Number of chains run at once (vectorised).")
    keep: Literal["all", "last"] = Field(
        "all",
        description="Keep every thinned sample of each chain, or only each chain's last "
        "(with sghmc: parallel SGHMC, the Bayesian deep ensemble).",
    )


class SGLDSpec(SamplerBase):
    """Stochastic gradient Langevin dynamics (``sgld``)."""

    engine: Literal["sgld"] = Field(description="Registry name of the engine.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


class SGHMCSpec(SamplerBase):
    """Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains."""

    engine: Literal["sghmc"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


class SGNHTSpec(SamplerBase):
    """Stochastic gradient Nosé-Hoover thermostat (``sgnht``)."""

    engine: Literal["sgnht"] = Field(description="Registry name of the engine.")
    alpha: float = Field(
        1.0, ge=0, description="Friction α: the noise scale and the thermostat's start."
    )
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


class BAOASpec(SamplerBase):
    """BAOA splitting of underdamped Langevin dynamics (``baoa``)."""

    engine: Literal["baoa"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")


class NUTSSpec(MethodBase):
    """Full-batch No-U-Turn sampler through pyro (``nuts``; extra `bayesflow-workflows[nuts]`)."""

    engine: Literal["nuts"] = Field(description="Registry name of the engine.")
    warmup: int = Field(500, ge=0, description="Warm-up (adaptation) iterations per chain.")
    num_samples: PositiveInt = Field(1000, description="Samples kept per chain.")
    chains: PositiveInt = Field(1, description="Number of chains (run one after another).")
    target_accept: float = Field(
        0.8, gt=0, lt=1, description="Target acceptance probability of step-size adaptation."
    )
    max_tree_depth: PositiveInt = Field(10, description="Largest tree depth of a NUTS step.")


MethodSpec = Annotated[
    (
        OptimizeSpec
        | DeepEnsembleSpec
        | LaplaceSpec
        | LaplaceDiagFisherSpec
        | LaplaceDenseFisherSpec
        | LaplaceDenseGGNSpec
        | LaplaceDenseHessianSpec
        | VISpec
        | VIDenseSpec
        | EKFDiagSpec
        | EKFDenseSpec
        | SGLDSpec
        | SGHMCSpec
        | SGNHTSpec
        | BAOASpec
        | NUTSSpec
    ),
    Field(discriminator="engine"),
]

ENGINE_SPECS: dict[str, type[MethodBase]] = {
    "map": OptimizeSpec,
    "mle": OptimizeSpec,
    "deep_ensemble": DeepEnsembleSpec,
    "laplace_diag_ggn": LaplaceSpec,
    "laplace_diag_fisher": LaplaceDiagFisherSpec,
    "laplace_dense_fisher": LaplaceDenseFisherSpec,
    "laplace_dense_ggn": LaplaceDenseGGNSpec,
    "laplace_dense_hessian": LaplaceDenseHessianSpec,
    "vi_diag": VISpec,
    "vi_dense": VIDenseSpec,
    "ekf_diag_fisher": EKFDiagSpec,
    "ekf_dense_fisher": EKFDenseSpec,
    "sgld": SGLDSpec,
    "sghmc": SGHMCSpec,
    "sgnht": SGNHTSpec,
    "baoa": BAOASpec,
    "nuts": NUTSSpec,
}

# Engines whose method needs `from:` a map or mle method (the mode they expand around).
LAPLACE_ENGINES: tuple[str, ...] = tuple(
    name for name in ENGINE_SPECS if name.startswith("laplace")
)

# Engines that cannot run at T = 0 (a spec check should reject 0 in `temperatures`).
POSITIVE_TEMPERATURE_ENGINES: tuple[str, ...] = ("nuts",)
