"""BAOA splitting of underdamped Langevin dynamics (``baoa``), one chain or many at once.

The BAOA scheme of Leimkuhler & Matthews (2015, *Molecular Dynamics*, p. 271,
https://doi.org/10.1007/978-3-319-16375-8), in the form of the posteriors library
(Duffield et al., 2025, https://arxiv.org/abs/2406.00104), on the per-datum log
posterior f of :mod:`bayesflow.temperature` with step size ε and friction α. One
gradient per step, four sub-steps::

    B:  m ← m + ε ∇f(θ)
    A:  θ ← θ + (ε/2) m
    O:  m ← e^{−αε} m + N(0, 𝒯 (1 − e^{−2αε}))
    A:  θ ← θ + (ε/2) m

BAOA is conjugate to BAOAB, so the two give the same trajectory of θ; its
Ornstein-Uhlenbeck step O is exact, which keeps the configurational bias of BAOAB
(second order in ε for θ's distribution). The dynamics target
``exp(f(θ)/𝒯 − ‖m‖²/(2𝒯))``: θ targets the tempered posterior with 𝒯 = T / N (the
prior weight inside f follows the convention). Momenta start from N(0, 𝒯). At T = 0
there is no noise: a damped symplectic (leapfrog-like) momentum ascent on f.

Chains, step-size schedules, burn-in, thinning and keep are those of
:mod:`bayesflow.engines.sgmcmc`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from bayesflow.methods.base import Method, SamplerBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import ChainTempering, Tempering

__all__ = ["METHODS", "BAOASpec", "BAOAState", "build"]


class BAOASpec(SamplerBase):
    """BAOA splitting of underdamped Langevin dynamics (``baoa``)."""

    engine: Literal["baoa"] = Field(description="Registry name of the engine.")
    alpha: float = Field(1.0, ge=0, description="Friction α.")


def build(problem: Problem, tempering: Tempering | ChainTempering, config: BAOASpec) -> Engine:
    """BAOA targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the momenta and the noise; the convention sets the
            prior weight.
            A ``ChainTempering`` gives every chain its own T (a vectorised grid).
        config: the method's spec (step size and schedule, friction, chains, burn-in,
            thinning, keep).
    """
    from bayesflow.engines.sgmcmc import build_chains

    friction = config.alpha
    chains = build_chains("baoa", problem, tempering, config)

    def init(params: Tensor, generator: torch.Generator) -> BAOAState:
        starts = chains.start(params, generator)
        return BAOAState(starts, chains.momenta(starts, generator), generator, 0, [])

    def update(state: BAOAState, batch: Batch) -> tuple[BAOAState, dict[str, Tensor]]:
        step_size, exploring = chains.step_size(state.step)
        grads, values = chains.gradient(state.params, batch)
        damping = math.exp(-friction * step_size)
        variance = chains.per_datum * (1 - damping**2)
        momenta = state.momenta + step_size * grads
        params = state.params + 0.5 * step_size * momenta
        momenta = damping * momenta + chains.noise(variance, exploring, momenta, state.generator)
        params = params + 0.5 * step_size * momenta
        step = state.step + 1
        chains.collect(state.samples, params, step, exploring)
        return BAOAState(params, momenta, state.generator, step, state.samples), chains.aux(values)

    def posterior(state: BAOAState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    return chains.engine(init, update, posterior)


class BAOAState(NamedTuple):
    """The state of K BAOA chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d).
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
        "baoa", BAOASpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset(
                {"kinetic_temperature", "configurational_temperature", "convergence"}
            ),
        ),
        build,
    ),
)
