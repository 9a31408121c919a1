"""Stochastic gradient Langevin dynamics (``sgld``), one chain or many at once.

SGLD (Welling & Teh, 2011, https://www.stats.ox.ac.uk/~teh/research/compstats/WelTeh2011a.pdf)
in the form of the posteriors library (Duffield et al., 2025,
https://arxiv.org/abs/2406.00104): an Euler-Maruyama step of the overdamped Langevin
diffusion ``dθ = ∇f(θ) dt + √(2𝒯) dW`` on the per-datum log posterior f of
:mod:`bayesflow.temperature`, with step size ε and gradient-noise estimate β::

    θ ← θ + ε ∇f(θ) + N(0, ε (2 − εβ) 𝒯)

Its stationary distribution (as ε → 0) is ``exp(f/𝒯)``, the tempered posterior with
𝒯 = T / N; the prior weight inside f follows the convention. The discretisation inflates
the variance of a Gaussian target of per-datum precision λ by a factor 1/(1 − ελ/2).
At T = 0 there is no noise and SGLD is exactly gradient ascent on f with step ε
(``map`` with ``sgd``, no momentum, ``lr: ε``). SGLD has no momenta.

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

__all__ = ["METHODS", "SGLDSpec", "SGLDState", "build"]


class SGLDSpec(SamplerBase):
    """Stochastic gradient Langevin dynamics (``sgld``)."""

    engine: Literal["sgld"] = Field(description="Registry name of the engine.")
    beta: float = Field(0.0, ge=0, description="Estimate β of the gradient noise.")


def build(problem: Problem, tempering: Tempering | ChainTempering, config: SGLDSpec) -> Engine:
    """SGLD targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the noise; the convention sets the prior weight.
            A ``ChainTempering`` gives every chain its own T (a vectorised grid).
        config: the method's spec (step size and schedule, β, chains, burn-in, thinning,
            keep).

    Raises:
        ValueError: when ``εβ > 2``, which would make the noise variance negative.
    """
    from bayesflow.engines.sgmcmc import build_chains

    beta = config.beta
    if config.lr * beta > 2:
        raise ValueError(
            f"sgld: the injected noise variance ε(2 − εβ)𝒯 is negative (lr={config.lr}, "
            f"beta={beta}); use lr·beta <= 2"
        )
    chains = build_chains("sgld", problem, tempering, config)

    def init(params: Tensor, generator: torch.Generator) -> SGLDState:
        return SGLDState(chains.start(params, generator), generator, 0, [])

    def update(state: SGLDState, batch: Batch) -> tuple[SGLDState, dict[str, Tensor]]:
        step_size, exploring = chains.step_size(state.step)
        grads, values = chains.gradient(state.params, batch)
        variance = step_size * (2 - step_size * beta) * chains.per_datum
        # In place on the state (consumed): the same kernels as θ + ε∇f + noise, the
        # noise drawn into the gradient's buffer once θ has read it.
        params = state.params.add_(grads.mul_(step_size))
        noise = chains.noise(variance, exploring, params, state.generator, scratch=grads)
        if not isinstance(noise, float):
            params.add_(noise)
        step = state.step + 1
        chains.collect(state.samples, params, step, exploring, copy=True)
        return SGLDState(params, state.generator, step, state.samples), chains.aux(values)

    def posterior(state: SGLDState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    return chains.engine(init, update, posterior)


class SGLDState(NamedTuple):
    """The state of K SGLD chains.

    Attributes:
        params: θ of every chain (K, d).
        generator: the source of the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order (shared in place with later states).
    """

    params: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]


METHODS = (
    Method(
        "sgld", SGLDSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"configurational_temperature", "convergence"}),
        ),
        build,
    ),
)
