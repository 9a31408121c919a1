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

``chains: K`` runs K chains on a (K, d) tensor with ``vmap(grad(f))``. Chain 0 starts
from the parameters given to ``init``; chains 1…K−1 from fresh ``problem.init_params``
draws, so a deep ensemble's members start apart. After ``burn_in`` update steps, every
``thin``-th state of every chain is kept (``keep: all``), or only each chain's final
state (``keep: last``: parallel SGHMC, the Bayesian deep ensemble).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor
from torch.func import grad_and_value, vmap

from bayesflow.engines import ENGINES
from bayesflow.engines.base import Batch, Engine, Posterior, Problem
from bayesflow.errors import StageError
from bayesflow.spec.methods import SGHMCSpec
from bayesflow.temperature import Tempering

__all__ = ["SGHMCState", "build"]


class SGHMCState(NamedTuple):
    """The state of K SGHMC chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d).
        generator: the source of the initial momenta and the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order. Appended to in place by ``update``
            (a new list per step would cost O(S²)), so a state's list is shared with
            the states after it.
    """

    params: Tensor
    momenta: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]


def gaussian(
    shape: tuple[int, ...], scale: float, like: Tensor, generator: torch.Generator
) -> Tensor:
    """``scale · N(0, I)`` of ``shape`` drawn from ``generator``, on ``like``'s device."""
    noise = torch.randn(shape, generator=generator, dtype=like.dtype, device=generator.device)
    return scale * noise.to(like.device)


@ENGINES.register("sghmc")
def build(problem: Problem, tempering: Tempering, config: SGHMCSpec) -> Engine:
    """SGHMC targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: 𝒯 = T / N scales the momenta and the noise; the convention sets the
            prior weight.
        config: the method's spec (step size, friction, chains, burn-in, thinning, keep).

    Raises:
        ValueError: when ``2α < εβ``, which would make the noise variance negative.
    """
    step_size, friction, per_datum = config.lr, config.alpha, tempering.per_datum
    noise_variance = step_size * (2 * friction - step_size * config.beta) * per_datum
    if noise_variance < 0:
        raise ValueError(
            f"sghmc: the injected noise variance ε(2α − εβ)𝒯 is negative (lr={step_size}, "
            f"alpha={config.alpha}, beta={config.beta}); use 2·alpha >= lr·beta"
        )
    noise_scale = math.sqrt(noise_variance)
    prior_weight = tempering.prior_weight

    def log_posterior(params: Tensor, batch: Batch) -> Tensor:
        return problem.log_posterior(params, batch, prior_weight=prior_weight)

    gradient = vmap(grad_and_value(log_posterior), in_dims=(0, None))

    def is_kept(step: int) -> bool:
        return step > config.burn_in and (step - config.burn_in) % config.thin == 0

    def init(params: Tensor, generator: torch.Generator) -> SGHMCState:
        starts = [params.detach()] + [
            problem.init_params(generator).to(params) for _ in range(config.chains - 1)
        ]
        chains = torch.stack(starts)
        momenta = torch.zeros_like(chains)
        if per_datum > 0:
            momenta = gaussian(tuple(chains.shape), math.sqrt(per_datum), chains, generator)
        return SGHMCState(chains, momenta, generator, 0, [])

    def update(state: SGHMCState, batch: Batch) -> tuple[SGHMCState, dict[str, Tensor]]:
        grads, values = gradient(state.params, batch)
        params = state.params + step_size * state.momenta
        momenta = state.momenta + step_size * grads - step_size * friction * state.momenta
        if noise_scale > 0:
            momenta = momenta + gaussian(
                tuple(momenta.shape), noise_scale, momenta, state.generator
            )
        step = state.step + 1
        if config.keep == "all" and is_kept(step):
            state.samples.append(params)
        new_state = SGHMCState(params, momenta, state.generator, step, state.samples)
        return new_state, {"loss": -values.mean().detach()}

    def posterior(state: SGHMCState) -> Posterior:
        if config.keep == "last":
            return Posterior(samples=state.params)
        if not state.samples:
            raise StageError(
                f"sghmc kept no samples: burn_in is {config.burn_in} but only {state.step} "
                "update steps ran; lower burn_in or raise epochs"
            )
        # Stacked as (K, S, d), then flattened so that each chain's samples are contiguous.
        return Posterior(samples=torch.stack(state.samples, 1).reshape(-1, problem.dimension))

    return Engine(init, update, posterior, config.epochs, config.batch_size)
