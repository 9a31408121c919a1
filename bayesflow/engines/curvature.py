"""Curvature of the negative log likelihood, the matrices Laplace and the EKF are built on.

Every function sums over the examples of one batch (full-data units, not per datum) at
the parameters ``params`` (d,) and ignores the prior, which the engines add themselves:

==============================  ==============================================  =========
function                        matrix                                          shape
==============================  ==============================================  =========
:func:`diagonal_ggn`            ``Σᵢ diag(Jᵢᵀ Hᵢ Jᵢ)``                          (d,)
:func:`dense_ggn`               ``Σᵢ Jᵢᵀ Hᵢ Jᵢ``                                (d, d)
:func:`diagonal_fisher`         ``Σᵢ gᵢ ⊙ gᵢ``                                  (d,)
:func:`dense_fisher`            ``Σᵢ gᵢ gᵢᵀ``                                   (d, d)
:func:`dense_hessian`           ``−∇² Σᵢ log p(yᵢ|xᵢ,θ)``                       (d, d)
==============================  ==============================================  =========

with ``Jᵢ = ∂ forward(θ, xᵢ)/∂θ`` (k, d), ``Hᵢ = −∂² log p(yᵢ|oᵢ)/∂oᵢ²`` (k, k) and
``gᵢ = ∇θ log p(yᵢ|xᵢ,θ)``. The generalised Gauss-Newton matrix (Martens, 2020,
https://arxiv.org/abs/1412.1193) equals the Fisher of the model's predictive for the
exponential-family likelihoods of :mod:`bayesflow.likelihoods`; the *empirical* Fisher
replaces that expectation by the observed targets (Kunstner et al., 2019,
https://arxiv.org/abs/1905.12558, on how the two differ).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.func import grad, hessian, vjp, vmap

from bayesflow.engines.base import Batch, Problem

__all__ = [
    "dense_fisher",
    "dense_ggn",
    "dense_hessian",
    "diagonal_fisher",
    "diagonal_ggn",
    "example_gradients",
    "gradient_chunks",
    "hessian_roots",
    "log_likelihood_gradient",
    "output_jacobians",
]

# On a CPU, chunks whose (chunk, k, d) products hold about 2²⁰ elements (4 MiB in float32)
# stay in cache: on a d = 5,575, k = 10 MLP and 2,000 examples the diagonal GGN took
# 0.31-0.37 s of CPU time with them and 0.77-0.86 s with the whole batch in one chunk
# (measured, one thread). An accelerator gets chunks as large as its memory allows.
CACHE_ELEMENTS = {"cpu": 2**20}

# What a per-example product holds besides its (k, d) result: the rows of the pullback,
# their accumulation and the caller's square or product (counted in (k, d) results).
PRODUCT_COPIES = 3


def chunk_size(problem: Problem, params: Tensor, inputs: Tensor, width: int, fixed: int = 0) -> int:
    """Examples per chunk of a per-example product with ``width`` rows of d, within the
    memory budget of :mod:`bayesflow.engines.memory` (and, on a CPU, within its cache:
    :data:`CACHE_ELEMENTS`).

    An example of a chunk holds ``width`` pullbacks of the forward pass (each about a
    forward pass's activations) and :data:`PRODUCT_COPIES` (width, d) tensors.

    Args:
        problem: the problem whose forward pass is measured.
        params: the parameters (d,) the products are taken at.
        inputs: the examples (n, ...).
        width: vector-Jacobian products per example (k for the GGN, 1 for gradients).
        fixed: bytes the caller holds whatever the chunk (a d × d sum).

    Raises:
        StageError: not even one example fits the budget (names ``BAYESFLOW_MEMORY_LIMIT``).
    """
    from bayesflow.engines.memory import memory_budget, row_cost, rows_within

    if inputs.shape[0] == 0:
        return 1
    cost = row_cost(problem.forward, lambda rows: problem.forward(params, rows), inputs)
    per_example = cost.per_row * (1 + 2 * width) + PRODUCT_COPIES * width * params.numel() * params.element_size()
    chunk = rows_within(
        memory_budget(params.device), fixed + cost.fixed * (1 + width), per_example, inputs.shape[0],
        "the curvature (per-example Jacobians)",
    )
    cached = CACHE_ELEMENTS.get(params.device.type)
    return chunk if cached is None else max(1, min(chunk, cached // (width * params.numel())))


def scaled_jacobians(problem: Problem, params: Tensor, inputs: Tensor, fixed: int = 0) -> Iterator[Tensor]:
    """``Lᵢᵀ Jᵢ`` (chunk, k, d) chunk by chunk, with ``Hᵢ = Lᵢ Lᵢᵀ``; chunks as large as the
    memory budget allows (:func:`chunk_size`; ``fixed``: bytes the caller holds besides).

    The square root comes from an eigendecomposition, as the output Hessians are only
    positive semi-definite; its rows are k vector-Jacobian products per example, vmapped
    over the examples of a chunk.
    """

    products = vmap(_pullback_rows(problem), in_dims=(None, 0, 0))
    with torch.no_grad():
        num_outputs = problem.forward(params, inputs[:1]).shape[-1]
    chunk = chunk_size(problem, params, inputs, num_outputs, fixed)
    for start in range(0, inputs.shape[0], chunk):
        piece = inputs[start : start + chunk]
        with torch.no_grad():
            roots = hessian_roots(problem.output_hessian(problem.forward(params, piece)))
        yield products(params, piece, roots)


def hessian_roots(hessians: Tensor) -> Tensor:
    """``Lᵢ`` (n, k, k) with ``Lᵢ Lᵢᵀ = Hᵢ`` for output Hessians (n, k, k), from their
    eigendecomposition (they are only positive semi-definite; rounding below 0 is clamped)."""
    eigenvalues, eigenvectors = torch.linalg.eigh(hessians)
    return eigenvectors * eigenvalues.clamp(min=0).sqrt().unsqueeze(-2)


def diagonal_ggn(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σᵢ diag(Jᵢᵀ Hᵢ Jᵢ) = Σᵢ Σₐ (Lᵢᵀ Jᵢ)ₐ²`` over the batch (d,)."""
    total = torch.zeros_like(params)
    for rows in scaled_jacobians(problem, params, batch[0]):
        total += (rows**2).sum((0, 1))
    return total


def dense_ggn(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σᵢ Jᵢᵀ Hᵢ Jᵢ = Σᵢ (Lᵢᵀ Jᵢ)ᵀ (Lᵢᵀ Jᵢ)`` over the batch (d, d)."""
    total = params.new_zeros((params.shape[0], params.shape[0]))
    held = total.numel() * total.element_size()
    for rows in scaled_jacobians(problem, params, batch[0], held):
        flat = rows.reshape(-1, params.shape[0])
        total += flat.T @ flat
    return total


def gradient_chunks(problem: Problem, params: Tensor, batch: Batch, fixed: int = 0) -> Iterator[Tensor]:
    """The per-example log-likelihood gradients ``gᵢ`` (chunk, d), chunk by chunk, vmapped;
    chunks as large as the memory budget allows (``fixed``: bytes the caller holds)."""

    def log_likelihood(flat: Tensor, example: Tensor, target: Tensor) -> Tensor:
        outputs = problem.forward(flat, example.unsqueeze(0))
        return problem.log_likelihood(outputs, target.unsqueeze(0))[0]

    gradient = vmap(grad(log_likelihood), in_dims=(None, 0, 0))
    inputs, targets = batch
    chunk = chunk_size(problem, params, inputs, 1, fixed)
    for start in range(0, inputs.shape[0], chunk):
        yield gradient(params, inputs[start : start + chunk], targets[start : start + chunk])


def example_gradients(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """The per-example log-likelihood gradients ``gᵢ`` (n, d), vmapped in chunks."""
    held = batch[0].shape[0] * params.numel() * params.element_size()
    return torch.cat(list(gradient_chunks(problem, params, batch, held)))


def diagonal_fisher(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """The diagonal empirical Fisher ``Σᵢ gᵢ ⊙ gᵢ`` over the batch (d,), chunk by chunk
    (the (n, d) gradients are never held at once)."""
    total = torch.zeros_like(params)
    for gradients in gradient_chunks(problem, params, batch):
        total += (gradients**2).sum(0)
    return total


def dense_fisher(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """The empirical Fisher ``Σᵢ gᵢ gᵢᵀ`` over the batch (d, d), chunk by chunk."""
    total = params.new_zeros((params.shape[0], params.shape[0]))
    held = total.numel() * total.element_size()
    for gradients in gradient_chunks(problem, params, batch, held):
        total += gradients.T @ gradients
    return total


def batch_log_likelihood(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σᵢ log p(yᵢ|xᵢ,θ)`` over the batch (a scalar)."""
    inputs, targets = batch
    return problem.log_likelihood(problem.forward(params, inputs), targets).sum()


def log_likelihood_gradient(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``Σᵢ ∇θ log p(yᵢ|xᵢ,θ)`` over the batch (d,)."""
    return grad(lambda flat: batch_log_likelihood(problem, flat, batch))(params)


def dense_hessian(problem: Problem, params: Tensor, batch: Batch) -> Tensor:
    """``−∇² Σᵢ log p(yᵢ|xᵢ,θ)`` over the batch (d, d), by forward-over-reverse AD."""
    return -hessian(lambda flat: batch_log_likelihood(problem, flat, batch))(params)


def output_jacobians(
    problem: Problem, params: Tensor, inputs: Tensor, fixed: int = 0
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(outputs, Jᵢ)``, the outputs (chunk, k) at ``params`` and their Jacobians
    ``∂ forward(params, xᵢ)/∂θ`` (chunk, k, d), chunk by chunk within the memory budget
    (:func:`chunk_size`; ``fixed``: bytes the caller holds besides). Row a of Jᵢ is one
    vector-Jacobian product with the a-th unit vector, vmapped over the examples."""
    products = vmap(_pullback_rows(problem), in_dims=(None, 0, None))
    with torch.no_grad():
        num_outputs = problem.forward(params, inputs[:1]).shape[-1]
    chunk = chunk_size(problem, params, inputs, num_outputs, fixed)
    identity = torch.eye(num_outputs, dtype=params.dtype, device=params.device)
    for start in range(0, inputs.shape[0], chunk):
        piece = inputs[start : start + chunk]
        with torch.no_grad():
            outputs = problem.forward(params, piece)
        yield outputs, products(params, piece, identity)


def _pullback_rows(problem: Problem) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """``(params, example, vectors (k, m)) -> (m, d)``: the vector-Jacobian products of one
    example's outputs with the columns of ``vectors``."""

    def rows(flat: Tensor, example: Tensor, vectors: Tensor) -> Tensor:
        def output(values: Tensor) -> Tensor:
            return problem.forward(values, example.unsqueeze(0))[0]

        pullback = vjp(output, flat)[1]
        return vmap(pullback)(vectors.mT)[0]

    return rows
