"""What every method shares: its traits, its descriptor and the common spec fields.

This module is torch-free, like every module of :mod:`bayesflow.methods` at import time:
the spec layer reads the spec classes and traits from here and from the method modules
without loading torch. See ``docs/design.md`` ("Methods describe themselves").

A method module declares ``METHODS``, a tuple of :class:`Method`: the name a spec gives
as ``engine:``, the pydantic spec class of its settings, its :class:`Traits` (what the
planner, the spec checks and the report need to know about it) and its ``build``
function (``build(problem, tempering, config) -> Engine``, torch imported inside).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from bayesflow.spec.prediction import PREDICTION_DESCRIPTION, Prediction
from bayesflow.spec.strict import Strict

__all__ = [
    "COMPILE_DESCRIPTION",
    "MINIBATCHES_DESCRIPTION",
    "PREDICTION_DESCRIPTION",
    "Method",
    "MethodBase",
    "Minibatches",
    "OptimizerSpec",
    "Prediction",
    "SamplerBase",
    "SamplerScheduleSpec",
    "ScheduleSpec",
    "Strict",
    "Traits",
]

Task = Literal["classification", "regression", "energy"]
ALL_TASKS: frozenset[str] = frozenset({"classification", "regression", "energy"})


@dataclass(frozen=True)
class Traits:
    """What a method says about itself, read by the planner, the spec checks and the report.

    Attributes:
        shares_temperature: when one fit serves every temperature of the grid: ``never``;
            ``always`` (the fit ignores T, e.g. maximum likelihood); ``posterior`` (the
            fit is the mode of ``p(θ|D)^(1/T)``, which does not move with T when the
            likelihood and the prior are tempered together: MAP, deep ensembles).
        provides_mode: its fit is a mode another method may start ``from``.
        needs_mode: it must start ``from`` a method that provides a mode (Laplace).
        curvature: the name of a curvature pass at the mode that does not depend on T
            and is shared by every temperature (each temperature only rescales it);
            None when the method has none.
        vectorizes: the axes its fits can run along in one batched program:
            ``chains`` (K chains or members at once), ``temperatures`` and ``seeds`` (a
            whole grid as one ``fit_group`` stage, ``execution.vectorize``).
        positive_temperature: it cannot run at T = 0 (a sampler of exp(−U/T) with no
            optimisation limit).
        posterior: ``samples``, ``gaussian`` (mean with var or cov) or ``point``.
        tasks: the likelihood tasks it applies to.
        diagnostics: the diagnostics that apply: ``kinetic_temperature``,
            ``configurational_temperature``, ``convergence`` (split R-hat and ESS),
            ``loss_convergence`` (the loss has stopped falling; evaluate/flags.py).
        uses_prior: False when the method ignores the spec's prior (maximum likelihood).
        prediction_fields: settings that change how the posterior predicts but not the
            curvature pass (left out of the curvature key, so two methods differing only
            there share one pass): ``prediction``; a Laplace's post-hoc prior and noise.
        models, priors: the model and prior names (``model.name``, ``prior.name``) it is
            valid for, checked at validate; None: any (a closed form holds for some only).
        per_example_rows: its engine takes one gradient or curvature row per example,
            each example one output row (EKF); a family whose example holds many data
            points (a causal language model's window of scored tokens) refuses it
            (:mod:`bayesflow.families`).
        dropout: its members are stochastic passes of the model with its LoRA dropout on
            at one parameter vector (MC dropout): ``validate`` requires a model with adapter
            dropout, and every prediction (the evaluate stage, ``load_posterior(...).predict``,
            the statement and text scores) runs its members inside
            :func:`bayesflow.llm.dropout.stochastic_passes`, seeded by the draw's seed.
    """

    shares_temperature: Literal["never", "always", "posterior"] = "never"
    provides_mode: bool = False
    needs_mode: bool = False
    curvature: str | None = None
    vectorizes: frozenset[str] = frozenset()
    positive_temperature: bool = False
    posterior: Literal["samples", "gaussian", "point"] = "samples"
    tasks: frozenset[str] = ALL_TASKS
    diagnostics: frozenset[str] = frozenset()
    uses_prior: bool = True
    prediction_fields: frozenset[str] = frozenset({"prediction"})
    models: frozenset[str] | None = None
    priors: frozenset[str] | None = None
    per_example_rows: bool = False
    dropout: bool = False

    def shared_across_temperatures(self, convention: str) -> bool:
        """Whether one fit serves every temperature under a temperature ``convention``."""
        if self.shares_temperature == "always":
            return True
        return self.shares_temperature == "posterior" and convention == "posterior"


@dataclass(frozen=True)
class Method:
    """One inference method: the ``engine:`` name, its spec class, traits and builder.

    Attributes:
        name: the name a spec gives as ``engine:``.
        spec: the pydantic model of its settings (its ``engine`` field is a Literal that
            holds ``name``).
        traits: what the rest of bayesflow needs to know about it.
        build: ``build(problem, tempering, config) -> Engine``, a function of the method's
            own module that imports torch when called.
        label: how figures and tables name it (default: the name).
    """

    name: str
    spec: type[Strict]
    traits: Traits
    build: Callable[..., Any]
    label: str = ""
    module: str = field(default="", compare=False)

    @property
    def summary(self) -> str:
        """The first line of the spec class's docstring."""
        return (inspect.getdoc(self.spec) or "").split("\n")[0]

    @property
    def display_name(self) -> str:
        """The label used in figures and tables."""
        return self.label or self.name

    def builder(self) -> Callable[..., Any]:
        """The ``build`` function."""
        return self.build


# ------------------------------------------------------------------ shared spec fields


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



Minibatches = Literal["independent", "shared"]
MINIBATCHES_DESCRIPTION = (
    "How the K parallel chains (ensemble members) draw minibatches: `independent` gives "
    "each its own shuffled order every epoch, so that with their own starts and noise the "
    "K chains are K independent runs, still one vectorised program (parallel SGHMC is an "
    "asymptotically Bayesian deep ensemble only with independent chains: Duffield et al., "
    "2025, https://arxiv.org/abs/2406.00104); `shared` feeds every chain the one order a "
    "single chain would see (the stream of earlier bayesflow versions; to compare chains "
    "on identical data). No effect on one chain or at full batch."
)

COMPILE_DESCRIPTION = (
    "Run the chains' gradient through torch.compile: measured 5-15x faster per gradient on "
    "Pima and 3-6x on digits' MLP (2-core CPU), after a compilation of 4-45 s per fit "
    "(needs a C++ compiler on a CPU). Pays for long runs with many chains (10,000 chains x "
    "2,000 steps), not for short fits. See bayesflow/engines/gradient.py."
)


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
    chains_per_start: PositiveInt = Field(
        1,
        description="Chains that start from one point (a superchain): `chains` is then "
        "`chains / chains_per_start` starting points, each shared by that many chains, which "
        "differ by their noise and minibatches; the fit logs nested R-hat over the superchains "
        "(Margossian et al., 2024). 1: every chain starts from its own draw.",
    )
    minibatches: Minibatches = Field("independent", description=MINIBATCHES_DESCRIPTION)
    compile: bool = Field(False, description=COMPILE_DESCRIPTION)
    keep: Literal["all", "last"] = Field(
        "all",
        description="Keep every thinned sample of each chain, or only each chain's last "
        "(with sghmc: parallel SGHMC, the Bayesian deep ensemble).",
    )

    @model_validator(mode="after")
    def _superchains_divide_chains(self) -> SamplerBase:
        if self.chains % self.chains_per_start:
            raise ValueError(
                f"chains ({self.chains}) must be a multiple of chains_per_start "
                f"({self.chains_per_start}); change one of them"
            )
        return self
