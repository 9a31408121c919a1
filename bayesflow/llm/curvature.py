"""Diagonal curvatures over scored tokens, the ones that scale to large vocabularies: one
gradient per scored token (the data points of :mod:`bayesflow.llm.problem`), never a GGN
pass per class.

- :func:`token_diagonal_fisher`, the empirical Fisher ``Σ_t g_t ⊙ g_t`` with
  ``g_t = ∇θ log p(y_t | context_t)`` at the observed token ``y_t``;
- :func:`sampled_token_ggn`, a Monte Carlo estimate of the diagonal GGN: the same sum with
  each ``y_t`` replaced by a token ``ŷ_t`` drawn from the model's own predictive
  ``p(· | context_t, θ)``. For a softmax over logits the GGN ``Jᵀ (diag p − p pᵀ) J``
  equals the Fisher ``E_{ŷ∼p}[∇ log p_ŷ ∇ log p_ŷᵀ]``, so one draw per token is an
  unbiased estimate of its diagonal (Martens, 2020, https://arxiv.org/abs/1412.1193,
  Section 9; Kunstner et al., 2019, https://arxiv.org/abs/1905.12558) at the cost of the
  empirical Fisher, where the exact diagonal GGN needs V backward passes per token.

The diagonal Laplace methods of those curvatures (traits ``curvature``: ``diag_fisher``,
``diag_ggn``) take them through the likelihood
(:meth:`bayesflow.llm.likelihood.NextToken.diagonal_curvature`); their per-*example*
curvatures would take a window of S tokens as one datum.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import jacrev, vmap

from bayesflow.engines.base import Batch, Problem

__all__ = [
    "CPU_WINDOWS_PER_CHUNK",
    "FISHER_CHUNK_BYTES",
    "GGN_SAMPLE_SEED",
    "sampled_token_ggn",
    "sampled_tokens",
    "token_curvature",
    "token_diagonal_fisher",
    "token_rows",
]

# The per-token gradients of one chunk of windows, (chunk, S, d) floats, stay below this.
FISHER_CHUNK_BYTES = 256 * 2**20

# On a CPU one window per chunk: a window's S vector-Jacobian products already batch, and
# more windows only add activations (a 4-layer hidden-128 llama, LoRA on q/k/o of the last
# layer, d = 6,144, 32 windows of 128 tokens scoring 64: 8.5 s one window per chunk, 11.8 s
# four, 20 s nineteen; scoring 16: 1.9 s against 7.7 s with four; one thread, measured).
CPU_WINDOWS_PER_CHUNK = 1

# The sampled GGN's generator is seeded with this at every engine build: each temperature
# of a seed (and the shared curvature pass) draws the same tokens, so gets the same curvature.
GGN_SAMPLE_SEED = 0

Curvature = Callable[[Problem, Tensor, Batch], Tensor]


def token_diagonal_fisher(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σ_t g_t ⊙ g_t`` (d,) over every scored token of the batch's windows.

    The S per-token gradients of a window are the rows of the Jacobian of its S token log
    probabilities (``jacrev``, in blocks of :func:`token_rows` rows), vmapped over the
    windows of a chunk.
    """
    inputs, targets = batch
    if inputs.shape[0] == 0:
        return torch.zeros_like(params)

    def token_log_probs(flat: Tensor, window: Tensor, scored: Tensor) -> Tensor:
        outputs = problem.forward(flat, window.unsqueeze(0))
        return problem.log_likelihood(outputs, scored.unsqueeze(0))[0]

    rows_per_pass = token_rows(problem, params, inputs[:1])
    jacobians = vmap(jacrev(token_log_probs, chunk_size=rows_per_pass), in_dims=(None, 0, 0))
    per_window = targets[0].numel() * params.numel() * params.element_size()
    chunk = max(1, FISHER_CHUNK_BYTES // max(per_window, 1))
    if params.device.type == "cpu":
        chunk = min(chunk, CPU_WINDOWS_PER_CHUNK)
    total = torch.zeros_like(params)
    for start in range(0, inputs.shape[0], chunk):
        rows = jacobians(params, inputs[start : start + chunk], targets[start : start + chunk])
        total += rows.detach().square().sum((0, 1))
    return total


def token_rows(problem: Problem, params: Tensor, window: Tensor) -> int:
    """Scored tokens whose gradients one backward pass takes at once, within a quarter of
    the memory budget (:func:`bayesflow.engines.memory.memory_budget`).

    A row holds the cotangent of the scored logits (S × V), its gradient (d) and, through
    the trainable layers, about 16 activations of L × hidden (an estimate): at Llama 2 7B's
    shape (V = 32,000, hidden 4,096) with 4,096-token windows scoring 2,048, a row is about
    1.3 GB, so an 80 GB GPU takes 7 tokens a pass; the CPU workflows take every token at once.
    """
    from bayesflow.engines.memory import memory_budget

    with torch.no_grad():
        scored, vocabulary = problem.forward(params, window).shape[-2:]
    config = getattr(problem.module, "config", None)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    row = 4 * (scored * vocabulary + params.numel() + 16 * window.shape[-1] * hidden)
    return int(min(scored, max(1, memory_budget(params.device) // 4 // row)))


def sampled_tokens(problem: Problem, params: Tensor, inputs: Tensor, generator: torch.Generator) -> Tensor:
    """One token per scored position (n, S), drawn from the model's predictive at ``params``."""
    with torch.no_grad():
        probabilities = problem.forward(params, inputs).softmax(-1)
    flat = probabilities.reshape(-1, probabilities.shape[-1])
    # inverse CDF: a uniform per position made on the generator's device (an in-place draw
    # such as multinomial would follow the tensor's device instead; tests/chaos/test_devices.py)
    uniform = torch.rand(flat.shape[0], 1, generator=generator, device=generator.device, dtype=flat.dtype)
    tokens = (flat.cumsum(-1) < uniform.to(flat.device)).sum(-1).clamp_(max=flat.shape[-1] - 1)
    return tokens.view(probabilities.shape[:-1])


def sampled_token_ggn(generator: torch.Generator) -> Curvature:
    """The diagonal GGN estimated with one token per scored position drawn from the model
    (``generator`` draws them): ``Σ_t ∇ log p(ŷ_t) ⊙ ∇ log p(ŷ_t)``, ``ŷ_t ∼ p(·|context_t, θ)``."""

    def curvature(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
        inputs = batch[0]
        return token_diagonal_fisher(problem, params, (inputs, sampled_tokens(problem, params, inputs, generator)))

    return curvature


def token_curvature(kind: str, problem: Problem) -> Curvature:
    """The token-level diagonal curvature ``kind``: the empirical Fisher for ``diag_fisher``,
    the sampled GGN for ``diag_ggn`` (its generator seeded with :data:`GGN_SAMPLE_SEED`, so
    every build draws the same tokens)."""
    if kind == "diag_fisher":
        return token_diagonal_fisher
    if kind == "diag_ggn":
        return sampled_token_ggn(torch.Generator(problem.device).manual_seed(GGN_SAMPLE_SEED))
    raise ValueError(f"{kind!r} has no token-level form (diag_fisher and diag_ggn do)")

