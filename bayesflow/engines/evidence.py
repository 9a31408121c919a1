"""The Laplace evidence (log marginal likelihood) and the prior that maximises it.

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
function, ``log_det(prior_precision (d,)) -> log det(C + diag(prior_precision))``,
differentiable in ``prior_precision`` (:data:`LogDet`). :func:`log_det_of` takes it from
a Laplace state: the state's own ``log_det`` method when it has one (a Kronecker-factored
state), otherwise built from its ``curvature`` tensor, (d,) diagonal or (d, d) dense.

**Choosing the prior (and noise).** :func:`maximise_evidence` maximises the evidence over
one prior precision α for every parameter (``prior_precision = α``; variance 1/α, as
laplace-torch's scalar ``optimize_prior_precision(method='marglik')``) and, for a gaussian
likelihood, over the noise sd σ, by Newton steps on (log α, log σ) in float64 with
Armijo backtracking (:func:`ascend`): run to convergence (gradient under 1e-9) rather than
laplace-torch's fixed number of Adam steps. In log α alone the objective is strictly concave (its derivative is
½(γ − α‖θ*‖²) with γ = Σ μⱼ/(μⱼ + α) over C's eigenvalues μⱼ, MacKay's effective number of
parameters, and its second derivative is negative), so the maximum is unique and is
MacKay's fixed point α = γ / ‖θ*‖². The mode stays where it was found (the post-hoc
workflow of laplace-torch): changing σ scales the curvature, ``C(σ) = C(σ₀)·(σ₀/σ)^k``,
with k = 2 for the GGN and the Hessian (both carry 1/σ²) and k = 4 for the empirical
Fisher (a squared gradient carries 1/σ⁴), and the log likelihood at the mode is
``−½ SSE/σ² − N log σ − (N/2) log 2π`` from the residual sum of squares SSE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesflow.engines.base import Problem
from bayesflow.errors import StageError

__all__ = [
    "EvidenceChoice",
    "LogDet",
    "ModeFit",
    "choose_prior",
    "dense_log_det",
    "diagonal_log_det",
    "gaussian_log_likelihood",
    "log_det_of",
    "log_evidence",
    "maximise_evidence",
    "mode_fit",
    "noise_exponent",
    "normal_log_prior",
    "scale_curvature",
]

LogDet = Callable[[Tensor], Tensor]
"""``prior_precision (d,) -> log det(C + diag(prior_precision))``, differentiable."""

LOG_2PI = math.log(2 * math.pi)


def diagonal_log_det(curvature: Tensor) -> LogDet:
    """``Σⱼ log(Cⱼ + pⱼ)`` for a diagonal curvature C (d,)."""
    values = curvature.detach().to(torch.float64)

    def log_det(prior_precision: Tensor) -> Tensor:
        return torch.log(values + prior_precision.to(values)).sum()

    return log_det


def dense_log_det(curvature: Tensor) -> LogDet:
    """``log det(C + diag p)`` for a dense curvature C (d, d).

    A prior precision equal for every parameter (the scalar prior, what the evidence
    optimises) takes the eigenvalues λ of C, computed once: ``Σⱼ log(λⱼ + α)``, O(d) per
    call; eigenvalues within rounding of zero (d·eps·max|λ|) count as zero. Any other
    prior precision takes a Cholesky factor, O(d³) per call. A precision C + diag p that
    is not positive semi-definite has no Laplace evidence: NaN, which the caller reports.
    """
    matrix = curvature.detach().to(torch.float64)
    matrix = 0.5 * (matrix + matrix.T)
    eigenvalues: list[Tensor] = []

    def log_det(prior_precision: Tensor) -> Tensor:
        prior_precision = prior_precision.to(matrix)
        detached = prior_precision.detach()
        if bool((detached == detached[0]).all()):
            if not eigenvalues:
                values = torch.linalg.eigvalsh(matrix)
                rounding = values.numel() * torch.finfo(values.dtype).eps * float(values.abs().max())
                eigenvalues.append(torch.where(values.abs() <= rounding, 0.0, values))
            shifted = eigenvalues[0] + prior_precision[0]
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
        log_likelihood: ``Σᵢ log p(yᵢ|xᵢ,θ*)`` under the spec's likelihood.
        num_data: N.
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


@dataclass(frozen=True)
class EvidenceChoice:
    """The evidence-maximising prior precision (and noise sd) at a mode.

    Attributes:
        prior_precision: α, one precision for every parameter (variance 1/α).
        noise_sd: σ (the given one when the noise was not optimised).
        log_evidence: the evidence at (α, σ).
        curvature_scale: ``(σ₀/σ)^k``, what the curvature is multiplied by.
        iterations: function evaluations the optimiser made.
    """

    prior_precision: float
    noise_sd: float | None
    log_evidence: float
    curvature_scale: float
    iterations: int


def maximise_evidence(
    params: Tensor, log_det: LogDet, mode: ModeFit, initial_precision: float,
    noise_sd: float | None = None, exponent: int = 2, max_iterations: int = 500,
) -> EvidenceChoice:
    """Maximise the Laplace evidence over one prior precision α (and σ when ``noise_sd``
    is given: a gaussian likelihood whose noise is chosen too) in log space (:func:`ascend`).

    Args:
        params: the mode θ* (d,).
        log_det: the curvature's :data:`LogDet` (at the noise ``noise_sd``).
        mode: the training data's fit at the mode (the SSE when σ is chosen).
        initial_precision: where α starts (the spec's prior precision).
        noise_sd: σ₀, the noise the curvature was computed with, to choose σ from; None
            keeps the likelihood as it is.
        exponent: k in ``C(σ) ∝ σ^(−k)`` (:func:`noise_exponent`).
        max_iterations: the optimiser's budget of function evaluations.

    Raises:
        StageError: the evidence is not finite at the start or at the optimum (an
            indefinite curvature, a zero mode).
    """
    theta = params.detach().to(torch.float64)
    dimension = theta.numel()
    ones = torch.ones(dimension, dtype=torch.float64, device=theta.device)
    optimise_noise = noise_sd is not None
    if optimise_noise and mode.squared_error is None:
        raise ValueError("choosing the noise needs the residual sum of squares (a gaussian likelihood)")
    start = [math.log(initial_precision)] + ([math.log(noise_sd)] if optimise_noise else [])  # type: ignore[arg-type]
    variables = torch.tensor(start, dtype=torch.float64, device=theta.device, requires_grad=True)

    def evidence(values: Tensor) -> tuple[Tensor, Tensor]:
        precision = torch.exp(values[0])
        if optimise_noise:
            log_scale = exponent * (math.log(noise_sd) - values[1])  # type: ignore[arg-type]
            log_likelihood = gaussian_log_likelihood(mode.squared_error, mode.num_data, torch.exp(values[1]))  # type: ignore[arg-type]
        else:
            log_scale = values[0].new_zeros(())
            log_likelihood = values[0].new_tensor(mode.log_likelihood)
        # log det(s·C + α) = d·log s + log det(C + α/s)
        determinant = dimension * log_scale + log_det(precision / torch.exp(log_scale) * ones)
        value = log_evidence(log_likelihood, normal_log_prior(theta, precision * ones), dimension, determinant)
        return value, log_scale

    if bool(torch.isnan(log_det(torch.zeros_like(theta)))):
        # −½ log det(C + α) → +∞ as α falls to −λ_min(C) > 0: no maximum to find.
        raise StageError(
            "the curvature has a negative eigenvalue (an exact Hessian is indefinite even at "
            "a mode of the posterior when the likelihood alone is not convex there), so the "
            "Laplace evidence grows without bound as the prior precision falls to it; choose "
            "the prior with a GGN or Fisher curvature, which is positive semi-definite"
        )
    if not bool(torch.isfinite(evidence(variables.detach())[0])):
        raise StageError(
            "the Laplace evidence is not finite at the spec's prior (the curvature plus the "
            "prior precision is singular); use a proper prior variance to start from"
        )
    point, iterations = ascend(lambda values: evidence(values)[0], variables.detach(), max_iterations)
    with torch.no_grad():
        value, log_scale = evidence(point)
    return EvidenceChoice(
        float(torch.exp(point[0])), float(torch.exp(point[1])) if optimise_noise else noise_sd,
        float(value), float(torch.exp(log_scale)), iterations,
    )


def ascend(function: Callable[[Tensor], Tensor], start: Tensor, max_iterations: int,
           tolerance: float = 1e-9) -> tuple[Tensor, int]:
    """Maximise a smooth function of a few variables: Newton steps where its Hessian is
    negative definite, gradient steps elsewhere, each halved until the value rises by
    Armijo's rule (a point where the function is not finite, such as an indefinite
    precision, counts as no rise). Stops when the gradient's largest entry is under
    ``tolerance``, or no step rises. Returns the point and the iterations made."""
    point = start.clone()
    value = function(point)
    for iteration in range(1, max_iterations + 1):
        gradient = torch.autograd.functional.jacobian(function, point)
        if float(gradient.abs().max()) < tolerance:
            return point, iteration
        hessian = torch.autograd.functional.hessian(function, point)
        direction = gradient
        if bool((torch.linalg.eigvalsh(hessian) < 0).all()):
            direction = -torch.linalg.solve(hessian, gradient)
        # Log-space steps of more than e³ at once only overshoot.
        direction = direction * min(1.0, 3.0 / float(direction.abs().max()))
        step = 1.0
        while step > 1e-12:
            candidate = point + step * direction
            candidate_value = function(candidate)
            if bool(torch.isfinite(candidate_value)) and float(candidate_value) >= float(value) + 1e-4 * step * float(gradient @ direction):
                break
            step /= 2
        else:
            return point, iteration
        point, value = candidate, candidate_value
    return point, max_iterations


def choose_prior(
    problem: Problem, state: Any, mode: ModeFit, *, curvature_name: str, prior_auto: bool = False,
    noise_sd: float | None = None,
) -> tuple[Problem, Any, dict[str, float]]:
    """The evidence of a Laplace state under ``problem``'s normal prior and, with
    ``prior_auto``, the problem and state of the evidence-maximising prior (and noise).

    Args:
        problem: the problem the mode was found under (its prior: the spec's, normal).
        state: a Laplace state at the mode (``params`` and a curvature, :func:`log_det_of`).
        mode: the training data's fit at the mode.
        curvature_name: the method's curvature (sets how C scales with σ).
        prior_auto: choose one prior variance for every parameter by the evidence.
        noise_sd: σ₀ of a gaussian likelihood whose noise is chosen too (with
            ``prior_auto``); None keeps the likelihood.

    Returns:
        The problem (its prior, and likelihood when σ is chosen, replaced), the state
        (its curvature rescaled to σ) and the metrics: ``log_evidence`` (at the prior the
        posterior uses) and, with ``prior_auto``, ``log_evidence_spec_prior``,
        ``prior_variance_chosen`` and ``noise_sd_chosen``.
    """
    from dataclasses import replace

    from bayesflow.likelihoods import gaussian
    from bayesflow.priors import diag_normal

    params = state.params.detach().to(torch.float64)
    log_det = log_det_of(state)
    spec_precision = problem.prior_precision.detach().to(params)
    at_spec = log_evidence(mode.log_likelihood, normal_log_prior(params, spec_precision),
                           problem.dimension, log_det(spec_precision))
    if not prior_auto:
        return problem, state, {"log_evidence": float(at_spec)}
    # Start from the spec's prior: its precision's geometric mean when it varies by tensor.
    initial = float(torch.exp(torch.log(spec_precision).mean()))
    choice = maximise_evidence(params, log_det, mode, initial, noise_sd, noise_exponent(curvature_name))
    prior = diag_normal(1.0 / choice.prior_precision).bind(
        problem.param_names, problem.param_shapes, problem.prior_precision.dtype, problem.device
    )
    chosen = replace(problem, prior_precision=prior.precision, log_prior=prior.log_prob)
    metrics = {"log_evidence": choice.log_evidence, "log_evidence_spec_prior": float(at_spec),
               "prior_variance_chosen": 1.0 / choice.prior_precision}
    if noise_sd is not None and choice.noise_sd is not None:
        likelihood = gaussian(choice.noise_sd)
        chosen = replace(chosen, log_likelihood=likelihood.log_prob, output_hessian=likelihood.output_hessian)
        state = scale_curvature(state, choice.curvature_scale)
        metrics["noise_sd_chosen"] = choice.noise_sd
    return chosen, state, metrics
