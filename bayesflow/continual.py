"""Continual learning over episodes of data (the posteriors paper, Section 5.2, at CPU scale).

Episodes arrive in sequence. Three protocols fit a MAP estimate episode by episode:

- ``online``: each episode starts from the previous parameters under the original prior
  (online SGD: it forgets what earlier episodes taught);
- ``laplace_prior``: after each episode a diagonal Laplace approximation
  N(θₖ, diag(1 / Pₖ)), ``Pₖ = Pₖ₋₁ + λ Cₖ``, of its posterior becomes the next episode's
  prior, so the posterior is carried forward (sequential Bayesian updating, MacKay 1992;
  Ritter et al., 2018). Cₖ is the episode's diagonal GGN, or on a language model
  (``likelihood: next_token``) its diagonal empirical Fisher over scored tokens
  (:func:`bayesflow.llm.curvature.token_diagonal_fisher`: one gradient per token, no pass
  per class of a 32k vocabulary). λ (``laplace_strength``, 1 by default: exact updating
  when the Laplace is exact) weights the carried curvature, as the posteriors library's
  continual LoRA example does (its prior sd becomes ``(sd⁻² + λ F)^(-1/2)`` with λ = 100);
  λ > 1 holds the earlier episodes' parameters more firmly, λ < 1 lets them move;
- ``offline``: each episode refits on every episode seen so far (the upper reference);
- ``single``: each episode is fitted alone, from the initial parameters under the original
  prior (the single-episode baseline: what a model of that episode alone reaches).

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
from bayesflow.engines.curvature import diagonal_fisher, diagonal_ggn
from bayesflow.engines.fit import fit, minibatches
from bayesflow.methods.registry import method_of
from bayesflow.temperature import Tempering

__all__ = ["fit_continual"]

# The per-example diagonal curvatures, by the name a likelihood gives (its continual_curvature).
GENERAL_CURVATURES = {"diag_ggn": diagonal_ggn, "diag_fisher": diagonal_fisher}


def _gaussian_prior(problem: Problem, mean: Tensor, precision: Tensor) -> Problem:
    """``problem`` with the prior N(mean, diag(1 / precision)) (constants dropped)."""

    def log_prior(params: Tensor) -> Tensor:
        return -0.5 * ((params - mean) ** 2 * precision).sum(-1)

    return replace(problem, log_prior=log_prior, prior_precision=precision)


def _curvature(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor,
               generator: torch.Generator) -> Tensor:
    """The diagonal GGN summed over one episode's training data (on a language model the
    diagonal empirical Fisher over its scored tokens)."""
    observation = problem.observation
    kind = "diag_ggn" if observation is None else observation.continual_curvature
    own = None if observation is None else observation.diagonal_curvature(kind, problem)
    diagonal = own or GENERAL_CURVATURES[kind]
    total = torch.zeros_like(params)
    for batch in minibatches(inputs, targets, 256, generator):
        total = total + diagonal(problem, params, batch).detach()
    return total


def _data_points(problem: Problem, targets: Tensor) -> int:
    """N of some training rows: rows, or a language model's scored tokens (rows × S)."""
    return problem.data_points(targets)


def _episode_nll(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor, batch: int | None) -> float:
    """The mean NLL per datum (per scored token on a language model), in batches of the
    method's ``batch_size`` (what a training step holds; all at once when null)."""
    total, step = 0.0, batch or max(inputs.shape[0], 1)
    with torch.no_grad():
        for start in range(0, inputs.shape[0], step):
            outputs = problem.forward(params, inputs[start : start + step])
            total += float(problem.log_likelihood(outputs, targets[start : start + step]).double().sum())
    return -total / max(targets.numel(), 1)


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
            posterior is the T = 1 one, whose precision is P + λ C).
        data: training inputs and targets, test inputs and targets.
        episodes: the episode of each training and each test point.
        generator: seeds the initialisation and the minibatches.
    """
    x_train, y_train, x_test, y_test = data
    episode_train = torch.as_tensor(episodes[0], device=x_train.device)
    episode_test = torch.as_tensor(episodes[1], device=x_test.device)
    count = int(episode_train.max()) + 1
    start = params = problem.init_params(generator)
    mean = torch.zeros_like(params)
    precision = problem.prior_precision.clone()
    traces: dict[str, list[float]] = {f"episode_nll/{j}": [] for j in range(count)}
    traces["seen_average_nll"] = []
    steps = 0
    strength = getattr(config, "laplace_strength", None)
    for episode in range(count):
        rows = episode_train <= episode if config.continual == "offline" else episode_train == episode
        inputs, targets = x_train[rows], y_train[rows]
        current = replace(_gaussian_prior(problem, mean, precision), num_data=_data_points(problem, targets))
        engine = method_of(config).builder()(current, replace(tempering, num_data=current.num_data), config)
        result = fit(engine, start if config.continual == "single" else params, inputs, targets, generator)
        assert result.posterior.mean is not None  # an optimiser's posterior is a point mass
        params, steps = result.posterior.mean, steps + result.steps
        if config.continual == "laplace_prior":
            curvature = _curvature(current, params, inputs, targets, generator)
            precision = precision + (curvature if strength is None else strength * curvature)
            mean = params
        losses = [
            _episode_nll(problem, params, x_test[episode_test == j], y_test[episode_test == j], config.batch_size)
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
