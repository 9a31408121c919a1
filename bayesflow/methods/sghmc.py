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

__all__ = ["METHODS", "SGHMCSpec", "SGHMCState", "build"]


class SGHMCSpec(SamplerBase):
    """Stochastic gradient Hamiltonian Monte Carlo (``sghmc``), serial or parallel chains."""

    engine: Literal["sghmc"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


def build(problem: Problem, tempering: Tempering | ChainTempering, config: SGHMCSpec) -> Engine:
    """SGHMC targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the momenta and the noise; the convention sets the
            prior weight.
            A ``ChainTempering`` gives every chain its own T (a vectorised grid).
        config: the method's spec (step size and schedule, friction, chains, burn-in,
            thinning, keep).

    Raises:
        ValueError: when ``2α < εβ``, which would make the noise variance negative.
    """
    from bayesflow.engines.sgmcmc import build_chains

    friction, beta = config.alpha, config.beta
    if 2 * friction < config.lr * beta:
        raise ValueError(
            f"sghmc: the injected noise variance ε(2α − εβ)𝒯 is negative (lr={config.lr}, "
            f"alpha={friction}, beta={beta}); use 2·alpha >= lr·beta"
        )
    chains = build_chains("sghmc", problem, tempering, config)

    def init(params: Tensor, generator: torch.Generator) -> SGHMCState:
        starts = chains.start(params, generator)
        return SGHMCState(starts, chains.momenta(starts, generator), generator, 0, [])

    def update(state: SGHMCState, batch: Batch) -> tuple[SGHMCState, dict[str, Tensor]]:
        step_size, exploring = chains.step_size(state.step)
        grads, values = chains.gradient(state.params, batch)
        variance = step_size * (2 * friction - step_size * beta) * chains.per_datum
        params = state.params + step_size * state.momenta
        momenta = state.momenta + step_size * grads - step_size * friction * state.momenta
        momenta = momenta + chains.noise(variance, exploring, momenta, state.generator)
        step = state.step + 1
        chains.collect(state.samples, params, step, exploring)
        return SGHMCState(params, momenta, state.generator, step, state.samples), chains.aux(values)

    def posterior(state: SGHMCState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    return chains.engine(init, update, posterior)


class SGHMCState(NamedTuple):
    """The state of K SGHMC chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d); their kinetic temperature ``mean(m²)·N``
            estimates T.
        generator: the source of the initial momenta and the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order (shared in place with later states).
    """

    params: Tensor
    momenta: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]


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
