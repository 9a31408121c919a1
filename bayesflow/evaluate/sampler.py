"""Diagnostics of a finished sampler fit, computed once from its final state and samples.

- Kinetic temperature of the final momenta (Wenzel et al., 2020, Section 4) against the
  χ² interval, overall and per parameter tensor; its expected value is 𝒯 = T / N because
  bayesflow's samplers run on the per-datum log posterior with unit mass.
- Configurational temperature ⟨θ·∇U(θ)⟩ / d of the final parameters, with U = −f the
  per-datum potential evaluated on (at most ``max_points``) training points.
- Across chains (``chains > 1`` and ``keep: all``): split R-hat and bulk ESS of the
  per-datum log posterior and of the first few coordinates. They are approximate for
  SG-MCMC, whose stationary law is only close to the target.
- Across superchains (``chains_per_start`` > 1, at least two starts, any ``keep``): nested
  R-hat of the same summaries (Margossian et al., 2024), and its maximum.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.func import grad, vmap

from bayesflow.engines.base import Posterior, Problem
from bayesflow.evaluate.convergence import chain_diagnostics, nested_diagnostics
from bayesflow.evaluate.temperatures import configurational_temperature, kinetic_temperature
from bayesflow.temperature import Tempering

__all__ = ["sampler_diagnostics"]

# Coordinates of θ tracked for R-hat/ESS: a handful is what Vehtari et al. suggest
# looking at alongside the log density; more adds cost and no new information.
TRACKED_COORDINATES = 4


def _log_posterior_fn(problem: Problem, tempering: Tempering, inputs: Tensor, targets: Tensor) -> Any:
    def value(params: Tensor) -> Tensor:
        return problem.log_posterior(params, (inputs, targets), tempering.prior_weight)

    return value


def sampler_diagnostics(
    problem: Problem,
    tempering: Tempering,
    state: Any,
    posterior: Posterior,
    chains: int,
    inputs: Tensor,
    targets: Tensor,
    max_points: int = 512,
    chains_per_start: int = 1,
) -> dict[str, float]:
    """Metrics of a sampler's final state and samples; empty for non-samplers or T = 0.

    ``chains`` is the number of chains whose draws ``posterior.samples`` holds (each
    chain's contiguous); ``chains_per_start`` M > 1 groups them into superchains of M
    (chains sharing a starting point), for nested R-hat, which needs only one draw per
    chain (``keep: last``).
    """
    momenta = getattr(state, "momenta", None)
    params = getattr(state, "params", None)
    if momenta is None or params is None or tempering.per_datum <= 0:
        return {}
    shapes, names = problem.param_shapes, problem.param_names
    # A sampler with a mass matrix M (a state with `mass`) has momenta ~ N(0, 𝒯 M): its
    # kinetic temperature is measured under M, as mean(m²/M).
    mass = getattr(state, "mass", None)
    metrics = kinetic_temperature(
        momenta.detach().cpu().numpy(), tempering.per_datum,
        mass=1.0 if mass is None else mass.detach().cpu().numpy(),
        param_shapes=shapes, param_names=names,
    ).metrics()
    log_posterior = _log_posterior_fn(problem, tempering, inputs[:max_points], targets[:max_points])
    batched = params if params.dim() == 2 else params.unsqueeze(0)
    with torch.no_grad():
        gradients = vmap(grad(log_posterior))(batched.detach())
    metrics.update(configurational_temperature(
        batched.cpu().numpy(), -gradients.cpu().numpy(), param_shapes=shapes, param_names=names,
        expected=tempering.per_datum,
    ).metrics())
    samples = posterior.samples
    draws = 0 if samples is None else samples.shape[0] // chains
    superchains = chains // chains_per_start
    if samples is not None and chains > 1 and (draws >= 4 or (chains_per_start > 1 and superchains >= 2)):
        per_chain = samples[: draws * chains].reshape(chains, draws, -1)
        with torch.no_grad():
            values = vmap(vmap(log_posterior))(per_chain)
        summaries = {"log_posterior": values.cpu().numpy()}
        for index in range(min(TRACKED_COORDINATES, per_chain.shape[-1])):
            summaries[f"theta_{index}"] = per_chain[..., index].cpu().numpy()
        if draws >= 4:
            metrics.update(chain_diagnostics(summaries))
        if chains_per_start > 1 and superchains >= 2:
            metrics.update(nested_diagnostics(summaries, chains_per_start))
    return {name: float(value) for name, value in metrics.items() if np.isfinite(value)}
