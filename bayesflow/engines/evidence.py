"""The Laplace evidence (log marginal likelihood) of a Laplace state at a mode.

Around a mode θ* with curvature C (the negative log likelihood's, summed over the N
training points) and a normal prior N(0, diag(1/p)), the Laplace approximation of the
evidence is (MacKay, 1992, "A practical Bayesian framework for backpropagation networks";
Immer et al., 2021, https://arxiv.org/abs/2104.04975; Daxberger et al., 2021,
https://arxiv.org/abs/2106.14806)::

    log p(D) ≈ log p(D|θ*) + log p(θ*) + (d/2) log 2π − ½ log det Λ,   Λ = C + diag(p)

which for the normal prior is ``log p(D|θ*) − ½ Σ pⱼθⱼ*² + ½ Σ log pⱼ − ½ log det Λ``.

Temperature does not enter: it is the evidence of the untempered model (T = 1, prior
and likelihood as the spec writes them), the quantity whose maximiser is the
empirical-Bayes prior. Under the ``posterior`` convention the mode and the curvature are
shared by every temperature, so a seed's Laplace fits all log the same number; under
``likelihood`` it is the untempered evidence evaluated at that temperature's mode.

**The log-determinant interface.** Everything here reads the curvature through one
function, ``log_det(prior_precision) -> log det(C + diag(prior_precision))``,
differentiable in ``prior_precision``, which is a 0-d tensor (one precision α for every
parameter: ``C + α I``) or a (d,) one (:data:`LogDet`). :func:`log_det_of` takes it from
a Laplace state: the state's own ``log_det`` method when it has one (a Kronecker-factored
state), otherwise built from its ``curvature`` tensor, (d,) diagonal or (d, d) dense.

Choosing the prior by this evidence (empirical Bayes) is
:mod:`bayesflow.engines.evidence_prior`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesflow.engines.base import Problem

__all__ = [
    "LOG_2PI",
    "LogDet",
    "ModeFit",
    "dense_log_det",
    "diagonal_log_det",
    "gaussian_log_likelihood",
    "log_det_of",
    "log_evidence",
    "mode_fit",
    "noise_exponent",
    "normal_log_prior",
    "scale_curvature",
    "semidefinite_eigenvalues",
]

LogDet = Callable[[Tensor], Tensor]
"""``prior_precision -> log det(C + diag(prior_precision))``, differentiable in it: a 0-d
tensor is one precision for every parameter (``C + α I``), a (d,) one a precision each."""

LOG_2PI = math.log(2 * math.pi)


def diagonal_log_det(curvature: Tensor) -> LogDet:
    """``Σⱼ log(Cⱼ + pⱼ)`` for a diagonal curvature C (d,)."""
    values = curvature.detach().to(torch.float64)

    def log_det(prior_precision: Tensor) -> Tensor:
        return torch.log(values + prior_precision.to(values)).sum()

    return log_det


def semidefinite_eigenvalues(curvature: Tensor) -> tuple[Tensor, Tensor, float]:
    """The eigen-decomposition of a dense curvature (d, d) read as a positive semi-definite
    matrix: its eigenvalues (float64, ascending) with the negative ones within rounding of
    zero set to zero, their eigenvectors, and that rounding.

    A GGN or Fisher is positive semi-definite in exact arithmetic, but one of rank r < d
    (fewer data than weights: laplace-torch's sinusoid example has 151 weights and 150
    points) computed in float32 has d − r eigenvalues of either sign around zero, as large
    as the matrix's rounding. That rounding is ``d · eps(dtype) · max|λ|`` with the eps of
    the dtype the curvature was *computed* in (numerical-rank practice: numpy's
    ``matrix_rank``; Golub & Van Loan, "Matrix Computations", §2.4.8), not float64's, into
    which the decomposition converts it. The positive eigenvalues are kept as computed:
    zeroing those under the rounding too (a bound, often hundreds of times the actual
    error) moved the sinusoid example's chosen prior variance by 10% from its float64
    twin's; kept, it is within 0.5%.
    """
    computed_in = curvature.dtype if curvature.dtype.is_floating_point else torch.float64
    matrix = curvature.detach().to(torch.float64)
    eigenvalues, eigenvectors = torch.linalg.eigh(0.5 * (matrix + matrix.T))
    rounding = eigenvalues.numel() * torch.finfo(computed_in).eps * float(eigenvalues.abs().max())
    return torch.where(eigenvalues.abs() <= rounding, eigenvalues.clamp(min=0.0), eigenvalues), eigenvectors, rounding


def dense_log_det(curvature: Tensor) -> LogDet:
    """``log det(C + diag p)`` for a dense curvature C (d, d).

    C is read through :func:`semidefinite_eigenvalues`, computed once: its negative
    eigenvalues within rounding of zero count as zero. One precision α for every parameter (a 0-d
    tensor: the scalar prior the evidence optimises) gives ``Σⱼ log(λⱼ + α)``, O(d) per
    call; a (d,) precision takes a Cholesky factor of ``V diag(λ) Vᵀ + diag p``, O(d³) per
    call. A curvature with an eigenvalue below −rounding (an indefinite Hessian) plus a
    precision that is not positive definite has no Laplace evidence: NaN, which the
    caller reports.
    """
    decomposed: list[Tensor] = []

    def parts() -> tuple[Tensor, Tensor]:
        if not decomposed:
            eigenvalues, eigenvectors, _ = semidefinite_eigenvalues(curvature)
            decomposed.extend([eigenvalues, (eigenvectors * eigenvalues) @ eigenvectors.T])
        return decomposed[0], decomposed[1]

    def log_det(prior_precision: Tensor) -> Tensor:
        eigenvalues, matrix = parts()
        prior_precision = prior_precision.to(eigenvalues)
        if prior_precision.ndim == 0:
            shifted = eigenvalues + prior_precision
            if bool((shifted.detach() < 0).any()):
                return prior_precision.new_tensor(float("nan"))
            return torch.log(shifted).sum()
        factor, info = torch.linalg.cholesky_ex(matrix + torch.diag(prior_precision))
        if int(info) != 0:
            return prior_precision.new_tensor(float("nan"))
        return 2 * torch.log(torch.diagonal(factor)).sum()

    return log_det


def log_det_of(state: Any) -> LogDet:
    """The log-determinant function of a Laplace state: its own ``log_det`` when it has
    one (a structured curvature, e.g. Kronecker factors), else from ``state.curvature``."""
    own = getattr(state, "log_det", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    curvature = state.curvature
    return diagonal_log_det(curvature) if curvature.ndim == 1 else dense_log_det(curvature)


def scale_curvature(state: Any, factor: float) -> Any:
    """The state with its curvature multiplied by ``factor`` (a new noise sd): the
    state's own ``scaled(factor)`` when it has one, else ``curvature`` times ``factor``."""
    own = getattr(state, "scaled", None)
    if callable(own):
        return own(factor)
    return state._replace(curvature=state.curvature * factor)


def noise_exponent(curvature_name: str) -> int:
    """k in ``C(σ) ∝ σ^(−k)``: 4 for an empirical Fisher (squared gradients), 2 otherwise."""
    return 4 if "fisher" in curvature_name else 2


def log_evidence(log_likelihood: Tensor | float, log_prior: Tensor | float, dimension: int,
                 log_det_precision: Tensor | float) -> Tensor:
    """``log p(D|θ*) + log p(θ*) + (d/2) log 2π − ½ log det Λ``."""
    return torch.as_tensor(
        log_likelihood + log_prior + 0.5 * dimension * LOG_2PI - 0.5 * log_det_precision,  # type: ignore[operator]
        dtype=torch.float64,
    )


def normal_log_prior(params: Tensor, prior_precision: Tensor) -> Tensor:
    """log N(θ; 0, diag(1/p)) summed over the entries."""
    return -0.5 * (prior_precision * params**2).sum() + 0.5 * (torch.log(prior_precision) - LOG_2PI).sum()


def gaussian_log_likelihood(squared_error: float, num_data: int, noise_sd: Tensor | float) -> Tensor:
    """``Σᵢ log N(yᵢ; fᵢ, σ²) = −½ SSE/σ² − N log σ − (N/2) log 2π``."""
    sd = torch.as_tensor(noise_sd, dtype=torch.float64)
    return -0.5 * squared_error / sd**2 - num_data * torch.log(sd) - 0.5 * num_data * LOG_2PI


@dataclass(frozen=True)
class ModeFit:
    """What the evidence needs of the training data at the mode.

    Attributes:
        log_likelihood: ``Σᵢ log p(yᵢ|xᵢ,θ*)`` under the spec's likelihood (on a language
            model the sum over every scored token, the data of its token Fisher).
        num_data: N, the rows (a language model's windows); read only by the gaussian noise.
        squared_error: ``Σᵢ (yᵢ − f(xᵢ,θ*))²`` for a gaussian likelihood, else None.
    """

    log_likelihood: float
    num_data: int
    squared_error: float | None = None


def mode_fit(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor,
             batch_size: int | None = None) -> ModeFit:
    """The log likelihood (and, for a gaussian likelihood, the residual sum of squares)
    of ``params`` on the training data: one forward pass, in batches of ``batch_size``."""
    count = inputs.shape[0]
    step = count if not batch_size else batch_size
    total, squared = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, count, max(step, 1)):
            outputs = problem.forward(params, inputs[start : start + step])
            piece = targets[start : start + step]
            total += float(problem.log_likelihood(outputs, piece).to(torch.float64).sum())
            if problem.likelihood == "gaussian":
                residual = piece.to(outputs.dtype) - outputs.squeeze(-1)
                squared += float((residual.to(torch.float64) ** 2).sum())
    return ModeFit(total, count, squared if problem.likelihood == "gaussian" else None)
