"""Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), one chain or many at once.

The update of the posteriors library (Duffield et al., 2025,
https://arxiv.org/abs/2406.00104) for SGHMC (Chen et al., 2014,
https://arxiv.org/abs/1402.4102) on the per-datum log posterior f of
:mod:`bayesflow.temperature`, with step size ε, friction α and gradient-noise estimate β::

    θ ← θ + ε m
    m ← m + ε ∇f(θ) − ε α m + N(0, ε (2α − εβ) 𝒯)

(both right-hand sides use the old θ and m). Its stationary distribution is
``exp(f(θ)/𝒯 − ‖m‖²/(2𝒯))``, so θ targets the tempered posterior ``exp(f/𝒯)`` with
𝒯 = T / N; the prior weight inside f follows the convention. Momenta start from
N(0, 𝒯). At T = 0 there is no noise and the update is exactly heavy-ball momentum
gradient ascent on f.

``chains: K`` runs K chains at once; with ``keep: last`` only each chain's final state
is kept: parallel SGHMC, the Bayesian deep ensemble. The chains are independent runs (own
start, noise and minibatch order; ``minibatches: shared`` gives them one order).
Chains, step-size schedules, burn-in and thinning are those of
:mod:`bayesflow.engines.sgmcmc`.

**Honest cold chains** (docs/cold-chains.md has the derivation and the numbers). With
a = εα and V the variance of the minibatch gradient, the momenta of the update above
settle at variance (ε(2α − εβ)𝒯 + ε²V) / (a(2 − a)), not 𝒯: the Euler step adds a
factor 1/(1 − a/2) (5% at a = 0.1), and at a cold 𝒯 the minibatch noise ε²V, which does
not shrink with T, dominates. Two options remove the two terms; both are off by default:

- ``discretisation: matched`` kicks with ε(1 − a/2) and injects a(2 − a)𝒯 − (ε(1 − a/2))²β𝒯.
  The momenta of a free particle are then exactly N(0, 𝒯), and the positions' drift
  and diffusion keep the ratio of the continuous dynamics (on a Gaussian target the
  position variance is no further off than Euler's, by the discrete Lyapunov equation).
  At T = 0 it is heavy-ball ascent with step ε(1 − a/2).
- ``gradient_noise: estimated`` measures V instead of taking a constant β: each
  minibatch is cut into ``noise_groups`` equal groups whose gradients are taken apart;
  their spread, averaged over steps (``noise_decay``), estimates the per-example gradient
  variance s² per parameter and chain, and V = s²/B. The injected variance becomes
  base(a)·𝒯 − kick²·V (Chen et al., 2014's B̂ correction), and where that would be
  negative the friction of that parameter is raised until it is not (a ≥ εα, capped at
  a = 1, where the update is Langevin dynamics with step ε²/2 and a parameter whose
  noise still exceeds 𝒯 runs hot). A raised friction keeps the target (any positive
  friction does) and slows the chain's exploration of that parameter. Use it with
  ``discretisation: matched``: under Euler a raised friction a inflates the momenta by
  1/(1 − a/2), up to 2 at a = 1.

  The correction assumes the minibatch noise of successive steps is independent, which
  epochs of a shuffled order are not: the batches of one epoch add up to the whole data
  set, so their noises cancel over an epoch. With the estimate the engine therefore draws
  its own minibatches, B examples with replacement from the whole training set at every
  step (one ``randint`` per step from the fit's generator, before the step's noise; K
  of them for independent chains), ⌈N/B⌉ steps per epoch; the fit hands it the whole
  data set (its ``batch_size`` is None). Measured while building it, on the closed-form
  regression of tests/engines/test_sghmc_noise.py at T = 0.01 in batches of 20 of 200:
  with shuffled epochs the correction kept the kinetic temperature but shrank the
  chains' position variance a hundredfold; with independent batches both are right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field, model_validator

from bayesflow.methods.base import Method, SamplerBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import ChainTempering, Tempering

__all__ = ["METHODS", "SGHMCSpec", "SGHMCState", "build"]


class SGHMCSpec(SamplerBase):
    """Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains."""

    engine: Literal["sghmc"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")
    beta: float = Field(
        0.0, ge=0,
        description="Constant estimate β of the gradient noise, in units of 𝒯 = T/N.",
    )
    discretisation: Literal["euler", "matched"] = Field(
        "euler",
        description=(
            "euler: the update of posteriors and Chen et al. (2014). matched: kick "
            "lr·(1 − a/2) and inject a·(2 − a)·𝒯 (a = lr·alpha), so the momenta sample "
            "N(0, 𝒯) exactly for a free particle (their kinetic temperature is T, not "
            "T/(1 − a/2)); see docs/cold-chains.md."
        ),
    )
    gradient_noise: Literal["constant", "estimated"] = Field(
        "constant",
        description=(
            "constant: beta. estimated: measure the minibatch gradient's variance per "
            "parameter from noise_groups groups of each batch, subtract it from the "
            "injected noise and raise a parameter's friction where it exceeds it, so cold "
            "chains keep their temperature (docs/cold-chains.md). Needs beta 0."
        ),
    )
    noise_groups: int = Field(
        2, ge=2,
        description="Groups each minibatch is cut into to estimate the gradient noise.",
    )
    noise_decay: float = Field(
        0.99, ge=0, lt=1,
        description="Weight of the past in the running estimate of the gradient noise.",
    )

    @model_validator(mode="after")
    def _checks(self) -> SGHMCSpec:
        if self.gradient_noise == "estimated" and self.beta > 0:
            raise ValueError(
                "gradient_noise: estimated measures the gradient noise itself; set beta "
                "to 0 or use gradient_noise: constant"
            )
        if self.discretisation == "matched" and self.lr * self.alpha > 1:
            raise ValueError(
                f"discretisation: matched needs lr·alpha <= 1 (lr={self.lr}, "
                f"alpha={self.alpha})"
            )
        return self


def build(problem: Problem, tempering: Tempering | ChainTempering, config: SGHMCSpec) -> Engine:
    """SGHMC targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the momenta and the noise; the convention sets the
            prior weight.
            A ``ChainTempering`` gives every chain its own T (a vectorised grid).
        config: the method's spec (step size and schedule, friction, discretisation,
            gradient noise, chains, burn-in, thinning, keep).

    Raises:
        ValueError: when the injected noise variance would be negative for the constant
            β (``2α < εβ`` under Euler).
    """
    import torch

    from bayesflow.engines.optimize import steps_per_epoch
    from bayesflow.engines.sgmcmc import build_chains, group_gradient, independent_batch

    friction, beta = config.alpha, config.beta
    matched = config.discretisation == "matched"
    a = config.lr * friction
    if a * (2 - a if matched else 2) < (config.lr * (1 - a / 2 if matched else 1)) ** 2 * beta:
        raise ValueError(
            f"sghmc: the injected noise variance ε(2α − εβ)𝒯 (matched: (a(2 − a) − "
            f"(ε(1 − a/2))²β)𝒯, a = εα) is negative (lr={config.lr}, alpha={friction}, "
            f"beta={beta}); use 2·alpha >= lr·beta, or a larger alpha"
        )
    chains = build_chains("sghmc", problem, tempering, config)
    size = config.batch_size
    estimate = (
        config.gradient_noise == "estimated" and chains.hot
        and size is not None and size < problem.num_data
    )
    grouped = group_gradient(chains, config.noise_groups) if estimate else None
    plain = not matched and grouped is None

    def init(params: Tensor, generator: torch.Generator) -> SGHMCState:
        starts = chains.start(params, generator)
        return SGHMCState(starts, chains.momenta(starts, generator), generator, 0, [])

    def step(state: SGHMCState, batch: Batch) -> tuple[SGHMCState, Tensor]:
        step_size, exploring = chains.step_size(state.step)
        noise = state.noise
        if grouped is None:
            grads, values = chains.gradient(state.params, batch)
        else:
            grads, values, spread = grouped(state.params, batch)
            if spread is not None:
                decay = config.noise_decay
                noise = spread if noise is None else decay * noise + (1 - decay) * spread
        # In place on the state's tensors (a state given to update is consumed): the
        # plain update is the same kernels as a new-tensor one (add, mul, add), and the
        # noise is drawn into the gradient's buffer once the momenta have read it, so a
        # step holds the state and one gradient of (K, d), nothing more.
        params, momenta = state.params, state.momenta
        params.add_(momenta, alpha=step_size)
        if plain:
            variance: float | Tensor = (
                step_size * (2 * friction - step_size * beta) * chains.per_datum
            )
            momenta.mul_(1 - step_size * friction).add_(grads, alpha=step_size)
        else:
            kick, damping, variance = corrected_step(
                step_size, friction, beta, matched, chains.per_datum, noise, batch
            )
            momenta.copy_(momenta + kick * grads - damping * momenta)
        chains.add_noise(momenta, variance, exploring, state.generator, scratch=grads)
        count = state.step + 1
        chains.collect(state.samples, params, count, exploring, copy=True)
        return SGHMCState(params, momenta, state.generator, count, state.samples, noise), values

    def update(state: SGHMCState, batch: Batch) -> tuple[SGHMCState, dict[str, Tensor]]:
        if size is None or not estimate:
            state, values = step(state, batch)
            return state, chains.aux(values)
        # One epoch of independent minibatches drawn from the whole training set.
        inputs, targets = batch
        seen = []
        for _ in range(steps_per_epoch(problem.num_data, size)):
            drawn = independent_batch(inputs, targets, size, chains, state.generator)
            state, values = step(state, drawn)
            seen.append(values)
        return state, chains.aux(torch.stack(seen).mean(0))

    def posterior(state: SGHMCState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    engine = chains.engine(init, update, posterior)
    # With the estimate the engine draws its own minibatches from the whole data set.
    return engine._replace(batch_size=None, streams=1) if estimate else engine


def corrected_step(
    step_size: float,
    friction: float,
    beta: float,
    matched: bool,
    per_datum: float | Tensor,
    noise: Tensor | None,
    batch: Batch,
) -> tuple[float | Tensor, float | Tensor, float | Tensor]:
    """The kick, the damping a and the injected variance of one step under the options.

    With a = εα and V the minibatch gradient's variance (β𝒯, or from the running
    per-example estimate ``noise``), the momenta get ``kick·∇f − a·m + N(0, variance)``:
    Euler kicks with ε and injects 2a𝒯 − ε²V; matched kicks with ε(1 − a/2) and injects
    a(2 − a)𝒯 − kick²V. With an estimate, a is raised per parameter to the least value
    that keeps the variance non-negative (r = ε²V/𝒯: a = r/2 under Euler, 2r/(4 + r)
    matched), at most 1 and never below εα.
    """
    import torch

    from bayesflow.engines.sgmcmc import minibatch_variance

    damping: float | Tensor = step_size * friction
    if noise is None:
        gradient_variance: float | Tensor = beta * per_datum
    else:
        gradient_variance = minibatch_variance(noise, batch)
        temperature = per_datum if isinstance(per_datum, torch.Tensor) else torch.tensor(per_datum)
        temperature = temperature.to(gradient_variance)
        ratio = torch.where(
            temperature > 0,
            step_size**2 * gradient_variance / temperature.clamp(min=torch.finfo(temperature.dtype).tiny),
            torch.zeros_like(gradient_variance),
        )
        needed = 2 * ratio / (4 + ratio) if matched else ratio / 2
        damping = needed.clamp(max=1).clamp(min=step_size * friction)
    if matched:
        kick = step_size * (1 - damping / 2)
        return kick, damping, damping * (2 - damping) * per_datum - kick**2 * gradient_variance
    return step_size, damping, 2 * damping * per_datum - step_size**2 * gradient_variance


class SGHMCState(NamedTuple):
    """The state of K SGHMC chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d); their kinetic temperature ``mean(m²)·N``
            estimates T.
        generator: the source of the initial momenta and the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order (shared in place with later states).
        noise: with ``gradient_noise: estimated``, the running estimate (K, d) of one
            example's gradient variance per parameter (None before the first estimate).
    """

    params: Tensor
    momenta: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]
    noise: Tensor | None = None


METHODS = (
    Method(
        "sghmc", SGHMCSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset(
                {"kinetic_temperature", "configurational_temperature", "convergence"}
            ),
        ),
        build,
    ),
)
