"""Stochastic gradient Nosé-Hoover thermostat (``sgnht``), one chain or many at once.

SGNHT (Ding et al., 2014, https://papers.nips.cc/paper/5592) in the form of the
posteriors library (Duffield et al., 2025, https://arxiv.org/abs/2406.00104) on the
per-datum log posterior f of :mod:`bayesflow.temperature`, with step size ε, friction α,
gradient-noise estimate β and a scalar thermostat ξ per chain::

    θ ← θ + ε m
    m ← m + ε ∇f(θ) − ε ξ m + N(0, ε (2α − εβ) 𝒯)
    ξ ← ξ + ε (‖m‖²/d − 𝒯)

(all right-hand sides use the old θ, m and ξ). The thermostat raises the friction while
the momenta are hotter than 𝒯 and lowers it while they are colder, so it absorbs an
unknown gradient-noise level. The stationary distribution is
``exp(f(θ)/𝒯 − ‖m‖²/(2𝒯) − d(ξ − α)²/(2𝒯))``: θ targets the tempered posterior with
𝒯 = T / N (the prior weight inside f follows the convention). Momenta start from
N(0, 𝒯) and ξ from α. At T = 0 there is no noise and the dynamics are heavy-ball
gradient ascent whose friction ξ grows with the kinetic energy (ξ only increases).

Chains, step-size schedules, burn-in, thinning and keep are those of
:mod:`bayesflow.engines.sgmcmc`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import ChainTempering, Tempering

__all__ = ["METHODS", "SGNHTSpec", "SGNHTState", "build"]


class SGNHTSpec(SamplerBase):
    """Stochastic gradient Nosé-Hoover thermostat (``sgnht``)."""

    engine: Literal["sgnht"] = Field(description="Registry name of the engine.")
    alpha: float = Field(
        1.0, ge=0, description="Friction α: the noise scale and the thermostat's start."
    )
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


def build(problem: Problem, tempering: Tempering | ChainTempering, config: SGNHTSpec) -> Engine:
    """SGNHT targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the momenta, the noise and the thermostat's target;
            the convention sets the prior weight.
            A ``ChainTempering`` gives every chain its own T (a vectorised grid).
        config: the method's spec (step size and schedule, α, β, chains, burn-in,
            thinning, keep).

    Raises:
        ValueError: when ``2α < εβ``, which would make the noise variance negative.
    """
    from torch import Tensor

    from bayesflow.engines.sgmcmc import build_chains

    friction, beta = config.alpha, config.beta
    if 2 * friction < config.lr * beta:
        raise ValueError(
            f"sgnht: the injected noise variance ε(2α − εβ)𝒯 is negative (lr={config.lr}, "
            f"alpha={friction}, beta={beta}); use 2·alpha >= lr·beta"
        )
    chains = build_chains("sgnht", problem, tempering, config)
    per_datum = chains.per_datum
    # The thermostat ξ is (K,): per-chain temperatures (K, 1) lose their last axis here.
    target = per_datum.squeeze(-1) if isinstance(per_datum, Tensor) else per_datum

    def init(params: Tensor, generator: torch.Generator) -> SGNHTState:
        starts = chains.start(params, generator)
        momenta = chains.momenta(starts, generator)
        thermostat = starts.new_full((starts.shape[0],), friction)
        return SGNHTState(starts, momenta, thermostat, generator, 0, [])

    def update(state: SGNHTState, batch: Batch) -> tuple[SGNHTState, dict[str, Tensor]]:
        step_size, exploring = chains.step_size(state.step)
        grads, values = chains.gradient(state.params, batch)
        variance = step_size * (2 * friction - step_size * beta) * per_datum
        params = state.params + step_size * state.momenta
        friction_term = step_size * state.thermostat.unsqueeze(-1) * state.momenta
        momenta = state.momenta + step_size * grads - friction_term
        momenta = momenta + chains.noise(variance, exploring, momenta, state.generator)
        kinetic = (state.momenta**2).mean(-1)
        thermostat = state.thermostat + step_size * (kinetic - target)
        step = state.step + 1
        chains.collect(state.samples, params, step, exploring)
        new_state = SGNHTState(params, momenta, thermostat, state.generator, step, state.samples)
        return new_state, chains.aux(values)

    def posterior(state: SGNHTState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    return chains.engine(init, update, posterior)


class SGNHTState(NamedTuple):
    """The state of K SGNHT chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d).
        thermostat: ξ of every chain (K,).
        generator: the source of the initial momenta and the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order (shared in place with later states).
    """

    params: Tensor
    momenta: Tensor
    thermostat: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]


METHODS = (
    Method(
        "sgnht", SGNHTSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset(
                {"kinetic_temperature", "configurational_temperature", "convergence"}
            ),
        ),
        build,
    ),
)
