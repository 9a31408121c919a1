"""The linearised (GLM) predictive in function space, chunked over test points.

Linearised around the posterior mean μ, the network is ``f_lin(x, θ) = f(x, μ) + J(x)(θ − μ)``
with ``J(x) = ∂f(x, μ)/∂θ`` (Immer et al., 2021, https://arxiv.org/abs/2008.08400). Under a
Gaussian posterior θ ~ N(μ, Σ) its outputs at a test point are Gaussian too::

    f_lin(x) ~ N(f_mean(x), f_var(x)),   f_mean(x) = f(x, μ),   f_var(x) = J(x) Σ J(x)ᵀ  (k × k)

so the predictive needs only these two moments per test point, whatever the number of
samples. :func:`moment_chunks` computes them a chunk of test points at a time: the chunk's
Jacobians (chunk, k, d) are per-example vector-Jacobian products
(:func:`bayesflow.engines.curvature.output_jacobians`), sized by the memory budget of
:mod:`bayesflow.engines.memory` (``BAYESFLOW_MEMORY_LIMIT``), and dropped once their
``J Σ Jᵀ`` is taken. Peak memory is one chunk's Jacobians and pullbacks, not n × k × d.

Three predictives use the moments:

- :func:`probit_probabilities`, classification in closed form: the probit approximation of
  E[softmax(f)] (MacKay, 1992; the multi-class "extended probit" of Daxberger et al., 2021,
  laplace-torch's ``link_approximation='probit'``): ``softmax(κ ⊙ f_mean)`` with
  ``κ = 1/√(1 + π/8 · diag f_var)``, for one logit ``sigmoid(κ f_mean)``;
- :func:`sample_outputs`, Monte Carlo over the outputs: logits ``f_mean + R ε`` with
  ``R Rᵀ = f_var`` (laplace-torch's ``link_approximation='mc'``). These have the law of
  parameter samples pushed through the linearised network (``prediction: linearized``),
  drawn without a Jacobian-vector product per sample;
- a Gaussian likelihood's predictive ``N(f_mean, f_var + σ²)``, exact for the linearised
  network (:mod:`bayesflow.evaluate.linearized`).

How a posterior plugs in (:class:`FunctionalVariance`): any Gaussian posterior that can map
a chunk of Jacobians J (chunk, k, d) to ``J Σ Jᵀ`` (chunk, k, k) serves. Diagonal (``var``)
and dense (``cov``) posteriors get one from :func:`functional_variance_of`, and so does a
posterior holding Kronecker-factored blocks as ``kronecker`` (KFAC Laplace:
:func:`kronecker_variance`, block by block in the factors' eigenbasis, Σ never formed); a
posterior whose Σ has yet another structure sets an attribute ``functional_variance`` on the
:class:`~bayesflow.engines.base.Posterior` it returns, and that one is used instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from bayesflow.engines.base import Posterior, Problem

__all__ = [
    "FunctionalVariance",
    "Moments",
    "functional_moments",
    "functional_variance_of",
    "kronecker_variance",
    "moment_chunks",
    "probit_probabilities",
    "sample_outputs",
]

# The probit approximation's constant: σ(a) ≈ Φ(√(π/8) a) (MacKay, 1992, "The evidence
# framework applied to classification networks"; Bishop, 2006, PRML §4.5.2, eq. 4.155), so
# E[σ(f)] ≈ σ(f_mean / √(1 + π/8 · f_var)).
PROBIT_SCALE = math.pi / 8


class FunctionalVariance(Protocol):
    """``jacobians (chunk, k, d) -> J Σ Jᵀ (chunk, k, k)`` for a Gaussian posterior's Σ."""

    def __call__(self, jacobians: Tensor) -> Tensor: ...


class Moments(NamedTuple):
    """The outputs' law under the linearised network at n test points.

    Attributes:
        mean: (n, k) ``f(x, μ)``.
        variance: (n, k, k) ``J(x) Σ J(x)ᵀ``.
    """

    mean: Tensor
    variance: Tensor


def functional_variance_of(posterior: Posterior) -> FunctionalVariance:
    """The ``J ↦ J Σ Jᵀ`` of a Gaussian posterior: its own ``functional_variance`` when it
    has one; for Kronecker-factored blocks (a ``kronecker`` covariance, KFAC Laplace)
    :func:`kronecker_variance`; else from ``cov`` (J Σ Jᵀ) or ``var`` ((J ⊙ var) Jᵀ).

    Raises:
        ValueError: for a posterior without a covariance (a sample set).
    """
    custom = getattr(posterior, "functional_variance", None)
    if callable(custom):
        return custom  # type: ignore[no-any-return]
    kronecker = getattr(posterior, "kronecker", None)
    if kronecker is not None and posterior.var is not None:
        return kronecker_variance(kronecker, posterior.var)
    if posterior.cov is not None:
        cov = posterior.cov

        def dense(jacobians: Tensor) -> Tensor:
            return jacobians @ cov.to(jacobians) @ jacobians.mT

        return dense
    if posterior.var is not None:
        var = posterior.var

        def diagonal(jacobians: Tensor) -> Tensor:
            return (jacobians * var.to(jacobians)) @ jacobians.mT

        return diagonal
    raise ValueError(
        "the linearised predictive needs a Gaussian posterior (a mean with var or cov), got "
        "samples; use `prediction: sampled` for this method"
    )


def kronecker_variance(kronecker: Any, var: Tensor) -> FunctionalVariance:
    """``J Σ Jᵀ`` for a covariance of Kronecker-factored blocks plus a diagonal elsewhere.

    A block ``Σ_b = (Q_G ⊗ Q_A) diag(vec V) (Q_G ⊗ Q_A)ᵀ`` over the entries ``index`` (g, a)
    (:mod:`bayesflow.engines.kronecker`: ``blocks`` with ``index``, ``output_vectors`` Q_G,
    ``input_vectors`` Q_A and ``scale`` √V) contributes ``Σ_ga R_k R_l V`` with
    ``R = Q_Gᵀ J_b Q_A``, the block's Jacobian (chunk, k, g, a) in the eigenbasis; entries no
    block covers contribute ``(J ⊙ var) Jᵀ`` with the posterior's ``var`` there.
    """
    blocks = tuple(kronecker.blocks)
    covered = torch.zeros(var.shape[0], dtype=torch.bool, device=var.device)
    for block in blocks:
        covered[block.index.reshape(-1).to(var.device)] = True
    rest = torch.where(covered, torch.zeros_like(var), var)

    def variance(jacobians: Tensor) -> Tensor:
        total = (jacobians * rest.to(jacobians)) @ jacobians.mT
        for block in blocks:
            piece = jacobians[..., block.index.to(jacobians.device)]
            rotated = block.output_vectors.to(piece).T @ piece @ block.input_vectors.to(piece)
            weighted = rotated * block.scale.to(piece).square()
            total = total + torch.einsum("rkga,rlga->rkl", weighted, rotated)
        return total

    return variance


def moment_chunks(problem: Problem, posterior: Posterior, inputs: Tensor) -> Iterator[Moments]:
    """:class:`Moments` of consecutive chunks of ``inputs``, each chunk as large as the memory
    budget allows (see :func:`~bayesflow.engines.curvature.chunk_size`).

    Raises:
        ValueError: for a sample-based posterior.
        StageError: not even one test point fits the memory budget.
    """
    from bayesflow.engines.curvature import output_jacobians

    variance_of = functional_variance_of(posterior)
    assert posterior.mean is not None
    mean = posterior.mean.to(problem.device)
    for outputs, jacobians in output_jacobians(problem, mean, inputs.to(problem.device)):
        with torch.no_grad():
            variance = variance_of(jacobians.detach())
        yield Moments(outputs, 0.5 * (variance + variance.mT))


def functional_moments(problem: Problem, posterior: Posterior, inputs: Tensor) -> Moments:
    """:class:`Moments` at every row of ``inputs`` (n, ...): (n, k) and (n, k, k).

    Each chunk is copied into tensors allocated once and then dropped: keeping thousands of
    chunks' small tensors alive pins the allocator's heap between the chunks' large
    temporaries (measured on the IMDB CNN-LSTM: about 80 KB of resident memory per test
    point kept, against none when copied out).
    """
    count = inputs.shape[0]
    assert posterior.mean is not None
    with torch.no_grad():
        first = problem.forward(posterior.mean.to(problem.device), inputs[:1].to(problem.device))
    width = first.shape[-1]
    mean = first.new_empty((count, width))
    variance = first.new_empty((count, width, width))
    start = 0
    for piece in moment_chunks(problem, posterior, inputs) if count else ():
        stop = start + piece.mean.shape[0]
        mean[start:stop], variance[start:stop] = piece.mean, piece.variance
        start = stop
    return Moments(mean, variance)


def probit_probabilities(moments: Moments, likelihood: Any) -> Tensor:
    """Class probabilities (n, C) of the probit approximation, float64.

    Categorical: ``softmax(κ ⊙ f_mean)``, ``κ = 1/√(1 + π/8 · diag f_var)`` (the
    off-diagonal covariances are not used, as in laplace-torch). Bernoulli (one logit):
    ``p = sigmoid(κ f_mean)``, returned as the columns ``(1 − p, p)``.
    """
    mean = moments.mean.double()
    diagonal = torch.diagonal(moments.variance.double(), dim1=-2, dim2=-1).clamp(min=0)
    scaled = mean / torch.sqrt(1 + PROBIT_SCALE * diagonal)
    return likelihood.probabilities(scaled)  # type: ignore[no-any-return]


def sample_outputs(moments: Moments, count: int, generator: torch.Generator) -> Tensor:
    """``count`` draws (count, n, k) of the outputs from ``N(f_mean, f_var)``.

    The root R of each f_var comes from its eigendecomposition (negative rounding clamped
    to 0), so a singular f_var (a zero-variance direction, a point mass) is fine. The noise
    is drawn once for all n points, so the draws do not depend on how the moments were
    chunked.
    """
    mean, variance = moments.mean, moments.variance
    eigenvalues, eigenvectors = torch.linalg.eigh(variance.double())
    root = (eigenvectors * eigenvalues.clamp(min=0).sqrt().unsqueeze(-2)).to(mean.dtype)
    noise = torch.randn(
        (count, *mean.shape), generator=generator, dtype=mean.dtype, device=generator.device
    ).to(mean.device)
    return mean + torch.einsum("nkl,snl->snk", root, noise)
