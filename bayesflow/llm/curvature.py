"""A diagonal empirical Fisher over scored tokens, the curvature that scales to large
vocabularies: Σ_t g_t ⊙ g_t with g_t = ∇θ log p(token_t | its context), one term per scored
token (the data points of :mod:`bayesflow.llm.problem`), never a GGN pass per class.

The methods' own ``laplace_diag_fisher`` takes one gradient per *example* (a window here,
whose log likelihood has one value per scored token), so a language model's Laplace uses
this curvature through :func:`build_token_fisher_laplace` (not yet a registered method:
docs/llm.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.func import jacrev, vmap

from bayesflow.engines.base import Batch, Engine, Problem
from bayesflow.temperature import Tempering

__all__ = ["FISHER_CHUNK_BYTES", "build_token_fisher_laplace", "token_diagonal_fisher"]

# The per-token gradients of one chunk of windows, (chunk, S, d) floats, stay below this.
FISHER_CHUNK_BYTES = 256 * 2**20


def token_diagonal_fisher(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σ_t g_t ⊙ g_t`` (d,) over every scored token of the batch's windows.

    The S per-token gradients of a window are the rows of the Jacobian of its S token log
    probabilities (``jacrev``), vmapped over the windows of a chunk.
    """
    inputs, targets = batch

    def token_log_probs(flat: Tensor, window: Tensor, scored: Tensor) -> Tensor:
        outputs = problem.forward(flat, window.unsqueeze(0))
        return problem.log_likelihood(outputs, scored.unsqueeze(0))[0]

    jacobians = vmap(jacrev(token_log_probs), in_dims=(None, 0, 0))
    per_window = targets[0].numel() * params.numel() * params.element_size()
    chunk = max(1, FISHER_CHUNK_BYTES // max(per_window, 1))
    total = torch.zeros_like(params)
    for start in range(0, inputs.shape[0], chunk):
        rows = jacobians(params, inputs[start : start + chunk], targets[start : start + chunk])
        total += rows.detach().square().sum((0, 1))
    return total


def build_token_fisher_laplace(problem: Problem, tempering: Tempering, config: Any) -> Engine:
    """Diagonal Laplace ``N(θ*, diag(T / (Σ_t g_t² + c·prior_precision)))`` over scored
    tokens; ``config`` is a ``laplace_diag_fisher`` spec (its ``batch_size`` bounds a pass)."""
    from bayesflow.methods.laplace import build_laplace

    return build_laplace("laplace_diag_fisher", problem, tempering, config, token_diagonal_fisher)
