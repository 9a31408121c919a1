"""Continual learning over episodes of data (the posteriors paper, Section 5.2, at CPU scale).

Episodes arrive in sequence. Three protocols fit a MAP estimate episode by episode:

- ``online``: each episode starts from the previous parameters under the original prior
  (online SGD: it forgets what earlier episodes taught);
- ``laplace_prior``: after each episode a diagonal GGN Laplace approximation
  N(θₖ, diag(1 / (Gₖ + Pₖ₋₁))) of its posterior becomes the next episode's prior, so the
  posterior is carried forward (sequential Bayesian updating, MacKay 1992; Ritter et al.,
  2018);
- ``offline``: each episode refits on every episode seen so far (the upper reference).

After each episode the test NLL of the current parameters on every episode's test data
is recorded, and the average over the episodes seen so far (Figures 5 and 6 of the paper).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bayesflow.engines.base import Posterior, Problem
from bayesflow.engines.curvature import diagonal_ggn
from bayesflow.engines.fit import fit, minibatches
from bayesflow.methods.registry import method_of
from bayesflow.temperature import Tempering

__all__ = ["fit_continual"]


def _gaussian_prior(problem: Problem, mean: Tensor, precision: Tensor) -> Problem:
    """``problem`` with the prior N(mean, diag(1 / precision)) (constants dropped)."""

    def log_prior(params: Tensor) -> Tensor:
        return -0.5 * ((params - mean) ** 2 * precision).sum(-1)

    return replace(problem, log_prior=log_prior, prior_precision=precision)


def _curvature(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor,
               generator: torch.Generator) -> Tensor:
    """The diagonal GGN summed over one episode's training data."""
    total = torch.zeros_like(params)
    for batch in minibatches(inputs, targets, 256, generator):
        total = total + diagonal_ggn(problem, params, batch).detach()
    return total


def _episode_nll(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor) -> float:
    with torch.no_grad():
        return float(-problem.log_likelihood(problem.forward(params, inputs), targets).mean())


def fit_continual(
    problem: Problem,
    config: Any,
    tempering: Tempering,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    episodes: tuple[np.ndarray, np.ndarray],
    generator: torch.Generator,
) -> tuple[Posterior, dict[str, list[float]], int]:
    """Run ``config.continual`` over the episodes; return the posterior, traces, steps.

    Args:
        problem: the full problem (its prior is the first episode's prior).
        config: a map/mle method spec with ``continual`` set.
        tempering: the temperature (the MAP does not depend on it; the carried Laplace
            posterior is the T = 1 one, whose precision is G + P).
        data: training inputs and targets, test inputs and targets.
        episodes: the episode of each training and each test point.
        generator: seeds the initialisation and the minibatches.
    """
    x_train, y_train, x_test, y_test = data
    episode_train = torch.as_tensor(episodes[0], device=x_train.device)
    episode_test = torch.as_tensor(episodes[1], device=x_test.device)
    count = int(episode_train.max()) + 1
    params = problem.init_params(generator)
    mean = torch.zeros_like(params)
    precision = problem.prior_precision.clone()
    traces: dict[str, list[float]] = {f"episode_nll/{j}": [] for j in range(count)}
    traces["seen_average_nll"] = []
    steps = 0
    for episode in range(count):
        rows = episode_train <= episode if config.continual == "offline" else episode_train == episode
        inputs, targets = x_train[rows], y_train[rows]
        current = replace(_gaussian_prior(problem, mean, precision), num_data=int(rows.sum()))
        engine = method_of(config).builder()(current, replace(tempering, num_data=current.num_data), config)
        result = fit(engine, params, inputs, targets, generator)
        assert result.posterior.mean is not None  # an optimiser's posterior is a point mass
        params, steps = result.posterior.mean, steps + result.steps
        if config.continual == "laplace_prior":
            precision = precision + _curvature(current, params, inputs, targets, generator)
            mean = params
        losses = [
            _episode_nll(problem, params, x_test[episode_test == j], y_test[episode_test == j])
            for j in range(count)
        ]
        for j, value in enumerate(losses):
            traces[f"episode_nll/{j}"].append(value)
        traces["seen_average_nll"].append(float(np.mean(losses[: episode + 1])))
    if config.continual == "laplace_prior":
        posterior = Posterior(mean=params, var=1.0 / precision)
    else:
        posterior = Posterior(mean=params, var=torch.zeros_like(params))
    return posterior, traces, steps
