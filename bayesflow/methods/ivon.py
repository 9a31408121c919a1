"""Improved Variational Online Newton (``ivon``): a diagonal Gaussian learnt by an Adam-like step.

IVON (Shen et al., ICML 2024, https://arxiv.org/abs/2402.17641) fits a mean-field Gaussian
``q(θ) = N(m, diag σ²)`` with ``σ² = 1 / (λ (h + δ))``: λ the effective sample size
(``ess``), h a running estimate of the diagonal Hessian of the per-datum loss and δ the
weight decay. Each step draws ``mc_samples`` parameters θ_s = m + σ ε_s, takes the gradient
g_s of the per-datum negative log likelihood at each, and (ĝ, ĥ the sample means of g_s
and of (θ_s − m)/σ² · g_s, Price's theorem's Hessian estimate) updates::

    μ ← β₁ μ + (1 − β₁) ĝ
    h ← β₂ h + (1 − β₂) ĥ + ½ (1 − β₂)² (h − ĥ)² / (h + δ)
    m ← m − α (h₀ + δ) (μ / (1 − β₁ᵗ) + δ m) / (h + δ)

The step is the ``ivon-opt`` package's own ``ivon.IVON`` optimiser (the ``ivon`` extra,
imported when the engine is built), run on the flat parameter vector as its one parameter:
bayesflow computes the gradient at the draws functionally and hands it to the optimiser.

Temperature and the prior: IVON minimises ``E_q[ℓ̄(θ)] + ½ δ E_q‖θ‖² − H[q] / λ`` with ℓ̄
the mean negative log likelihood. Multiplied by N this is ``E_q[U_T] − (N/λ) H[q]``, the
variational objective of the tempered target ``exp(−U/T)`` of :mod:`bayesflow.temperature`
exactly when ``λ = N / T`` and ``δ = c α / N``, α the prior's precision and c the prior
weight (1 under the posterior convention, T under the likelihood one). So the temperature
grid maps onto IVON as ``ess = N / T`` (an explicit ``ess`` is the value at T = 1, divided
by T), and the weight decay is the prior's precision per datum (``weight_decay: null``, the
default; a number replaces the prior by the Gaussian of precision N δ / c). T = 0 has no
finite λ: refused. The posterior is ``Posterior(mean=m, var=σ²)``; the evaluate stage
draws its ``n_samples`` members from it.

Random draws: IVON draws its noise from torch's global generator, so every step draws one
integer seed from the fit's generator and runs the optimiser's draws under it, inside
``torch.random.fork_rng`` (the global state is left as it was): one seed, one fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, PositiveFloat, PositiveInt

from bayesflow.methods.base import Method, MethodBase, Traits
from bayesflow.spec.prediction import PREDICTION_DESCRIPTION, Prediction

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.temperature import Tempering

__all__ = ["INSTALL", "METHODS", "IVONSpec", "IVONState", "build", "require_ivon", "weight_decay"]

INSTALL = "pip install 'bayesflow-workflows[ivon]'"

# The seed each step draws for the optimiser's noise (torch.manual_seed takes < 2⁶³).
SEED_BOUND = 2**62


class IVONSpec(MethodBase):
    """Improved Variational Online Newton (Shen et al., 2024): a diagonal Gaussian, Adam's cost."""

    engine: Literal["ivon"] = Field(description="Registry name of the engine.")
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)
    lr: PositiveFloat = Field(0.1, description="Learning rate α (the paper's default is 0.1 "
                              "for image classifiers, with `hess_init` 0.1-1).")
    ess: PositiveFloat | None = Field(
        None,
        description="Effective sample size λ at T = 1; the fit at temperature T uses λ / T. "
        "null means N, the number of training data points (scored tokens for a language "
        "model): the Bayesian choice.",
    )
    hess_init: PositiveFloat = Field(1.0, description="Initial Hessian estimate h₀.")
    beta1: float = Field(0.9, ge=0, lt=1, description="Decay β₁ of the gradient's momentum.")
    beta2: float = Field(
        0.99999, ge=0, le=1,
        description="Decay β₂ of the Hessian estimate (the paper's default, 1 − 10⁻⁵; 1 "
        "keeps h at `hess_init`).",
    )
    weight_decay: float | None = Field(
        None, ge=0,
        description="Weight decay δ. null ties it to the prior: δ = c·α/N with α the "
        "prior's precision (c = 1 under the posterior convention, T under the likelihood "
        "one), so the fit targets the spec's posterior; a number replaces the prior by the "
        "Gaussian of precision N·δ/c.",
    )
    mc_samples: PositiveInt = Field(1, description="Parameter draws (gradients) per step.")
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")


def require_ivon(where: str = "methods.ivon") -> Any:
    """Import the ``ivon`` module of ``ivon-opt``, or raise a :class:`StageError` naming the extra.

    Args:
        where: the spec key that needs it, for the message.
    """
    import importlib

    from bayesflow.errors import StageError

    try:
        return importlib.import_module("ivon")
    except ImportError as exc:
        raise StageError(
            f"{where}: the `ivon` engine needs the `ivon-opt` package, from the optional "
            f"`ivon` extra; install it with `{INSTALL}`"
        ) from exc


def weight_decay(problem: Problem, tempering: Tempering, config: IVONSpec) -> float | Tensor:
    """δ: the spec's number, or the prior's precision per datum times the prior weight c.

    A float when every parameter has one precision, else a (d,) tensor.

    Raises:
        StageError: the prior is neither normal nor flat and no number is given.
    """
    from bayesflow.engines.flat import normal_prior
    from bayesflow.errors import StageError
    from bayesflow.priors import BoundPrior

    if config.weight_decay is not None:
        return config.weight_decay
    prior = getattr(problem.log_prior, "__self__", None)
    if isinstance(prior, BoundPrior) and prior.family == "flat":
        return 0.0
    bound = normal_prior(problem)
    if bound is None:
        raise StageError(
            "ivon: its weight decay is the precision of a normal prior, but the spec's prior "
            "is not normal; use `prior: {name: diag_normal}` (or he_normal, none), or give "
            "`weight_decay` a number"
        )
    precision = bound.precision.to(problem.device) * (tempering.prior_weight / problem.num_data)
    if precision.stride() == (0,) or bool((precision == precision[0]).all()):
        return float(precision[0])
    return precision.contiguous()


def build(problem: Problem, tempering: Tempering, config: IVONSpec) -> Engine:
    """IVON's step (the ``ivon-opt`` optimiser) on the flat vector at ``ess = λ / T``.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T sets λ; the convention sets the prior weight in δ.
        config: the method's spec.

    Raises:
        StageError: at T = 0, without the ``ivon`` extra, or under a prior it cannot tie.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.errors import StageError

    if tempering.temperature == 0:
        raise StageError(
            "ivon: T = 0 has no finite effective sample size (ess = N / T); drop 0 from "
            "`temperatures`, or use `map` for the T = 0 limit"
        )
    ivon = require_ivon()
    decay = weight_decay(problem, tempering, config)
    ess = (config.ess if config.ess is not None else problem.num_data) / tempering.temperature
    # The likelihood alone: the prior enters as the weight decay δ.
    gradient = chain_gradient(problem, 0.0)

    def init(params: Tensor, generator: torch.Generator) -> IVONState:
        mean = params.detach().clone().requires_grad_(True)
        optimizer = ivon.IVON(
            [mean], lr=config.lr, ess=ess, hess_init=config.hess_init, beta1=config.beta1,
            beta2=config.beta2, weight_decay=decay if isinstance(decay, float) else 0.0,
            mc_samples=config.mc_samples,
        )
        if not isinstance(decay, float):
            # One δ per parameter: the optimiser's arithmetic is elementwise in it.
            optimizer.param_groups[0]["weight_decay"] = decay
        return IVONState(mean, optimizer, generator, 0)

    def update(state: IVONState, batch: Batch) -> tuple[IVONState, dict[str, Tensor]]:
        mean, optimizer = state.mean, state.optimizer
        seed = int(torch.randint(0, SEED_BOUND, (1,), generator=state.generator, device=state.generator.device))
        devices = [mean.device] if mean.device.type == "cuda" else []
        losses = []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for _ in range(config.mc_samples):
                with optimizer.sampled_params(train=True):
                    draw = mean.detach()
                    ascent, log_likelihoods = gradient(draw.unsqueeze(0), batch)
                    mean.grad = ascent[0].neg_()
                    losses.append(-log_likelihoods[0] + 0.5 * (decay * draw.square()).sum())
            optimizer.step()
        mean.grad = None
        return IVONState(mean, optimizer, state.generator, state.step + 1), {
            "loss": torch.stack(losses).mean()
        }

    def posterior(state: IVONState) -> Posterior:
        return Posterior(mean=state.mean.detach().clone(), var=state.variance())

    return Engine(init, update, posterior, config.epochs, config.batch_size)


class IVONState(NamedTuple):
    """The state of an IVON fit.

    Attributes:
        mean: m (d,), the optimiser's one parameter (a leaf tensor it updates in place).
        optimizer: the ``ivon.IVON`` optimiser; its one group holds the momentum μ
            (``momentum``), the Hessian estimate h (``hess``), λ (``ess``) and δ
            (``weight_decay``).
        generator: the source of each step's seed.
        step: update steps taken.
    """

    mean: Tensor
    optimizer: Any
    generator: torch.Generator
    step: int

    @property
    def hessian(self) -> Tensor:
        """h (d,), the running diagonal Hessian estimate of the per-datum loss."""
        return self.optimizer.param_groups[0]["hess"]  # type: ignore[no-any-return]

    def variance(self) -> Tensor:
        """σ² = 1 / (λ (h + δ)) (d,), the variance the optimiser draws its noise with."""
        group = self.optimizer.param_groups[0]
        return (1.0 / (group["ess"] * (group["hess"] + group["weight_decay"]))).detach()


METHODS = (
    Method(
        "ivon", IVONSpec,
        Traits(
            positive_temperature=True,
            posterior="gaussian",
            priors=frozenset({"diag_normal", "he_normal", "none"}),
            diagnostics=frozenset({"loss_convergence"}),
        ),
        build, label="IVON",
    ),
)
