"""The prior (and noise) that maximise the Laplace evidence at a mode: empirical Bayes.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesflow.engines.base import Problem
from bayesflow.engines.evidence import (
    LOG_2PI,
    LogDet,
    ModeFit,
    gaussian_log_likelihood,
    log_det_of,
    log_evidence,
    noise_exponent,
    normal_log_prior,
    scale_curvature,
    semidefinite_eigenvalues,
)
from bayesflow.errors import StageError

__all__ = ["EvidenceChoice", "ascend", "choose_prior", "maximise_evidence"]


@dataclass(frozen=True)
class EvidenceChoice:
    """The evidence-maximising prior precision (and noise sd) at a mode.

    Attributes:
        prior_precision: α, one precision for every parameter (variance 1/α), or one per
            group of parameters.
        noise_sd: σ (the given one when the noise was not optimised).
        log_evidence: the evidence at (α, σ).
        curvature_scale: ``(σ₀/σ)^k``, what the curvature is multiplied by.
        iterations: function evaluations the optimiser made.
    """

    prior_precision: tuple[float, ...]
    noise_sd: float | None
    log_evidence: float
    curvature_scale: float
    iterations: int


def maximise_evidence(
    params: Tensor, log_det: LogDet, mode: ModeFit, initial_precision: float | Sequence[float],
    noise_sd: float | None = None, exponent: int = 2, max_iterations: int = 500,
    groups: Tensor | None = None,
) -> EvidenceChoice:
    """Maximise the Laplace evidence over the prior precision, one α for every parameter
    or one per group (``groups``), and over σ when ``noise_sd`` is given (a gaussian
    likelihood whose noise is chosen too), in log space (:func:`ascend`).

    Args:
        params: the mode θ* (d,).
        log_det: the curvature's :data:`LogDet` (at the noise ``noise_sd``).
        mode: the training data's fit at the mode (the SSE when σ is chosen).
        initial_precision: where α starts (the spec's prior precision), one per group.
        noise_sd: σ₀, the noise the curvature was computed with, to choose σ from; None
            keeps the likelihood as it is.
        exponent: k in ``C(σ) ∝ σ^(−k)`` (:func:`noise_exponent`).
        max_iterations: the optimiser's budget of iterations.
        groups: (d,) the group of each parameter (0 … G−1), e.g. its tensor; None: one.

    Raises:
        StageError: the curvature is indefinite, or the evidence is not finite at the start.
    """
    theta = params.detach().to(torch.float64)
    dimension = theta.numel()
    initial = [initial_precision] if isinstance(initial_precision, (int, float)) else list(initial_precision)
    if groups is None:
        groups = torch.zeros(dimension, dtype=torch.long, device=theta.device)
    optimise_noise = noise_sd is not None
    if optimise_noise and mode.squared_error is None:
        raise ValueError("choosing the noise needs the residual sum of squares (a gaussian likelihood)")
    start = [math.log(value) for value in initial] + ([math.log(noise_sd)] if optimise_noise else [])  # type: ignore[arg-type]
    variables = torch.tensor(start, dtype=torch.float64, device=theta.device)
    count = len(initial)

    ones = torch.ones(dimension, dtype=torch.float64, device=theta.device)

    def evidence(values: Tensor) -> tuple[Tensor, Tensor]:
        # One precision: a 0-d tensor, which a dense log-determinant takes by eigenvalues.
        precision = torch.exp(values[0]) if count == 1 else torch.exp(values[:count])[groups]
        if optimise_noise:
            log_scale = exponent * (math.log(noise_sd) - values[count])  # type: ignore[arg-type]
            log_likelihood = gaussian_log_likelihood(mode.squared_error, mode.num_data, torch.exp(values[count]))  # type: ignore[arg-type]
        else:
            log_scale = values.new_zeros(())
            log_likelihood = values.new_tensor(mode.log_likelihood)
        # log det(s·C + diag p) = d·log s + log det(C + diag p/s)
        determinant = dimension * log_scale + log_det(precision / torch.exp(log_scale))
        value = log_evidence(log_likelihood, normal_log_prior(theta, precision * ones), dimension, determinant)
        return value, log_scale

    if bool(torch.isnan(log_det(theta.new_zeros(())))):
        # −½ log det(C + α) → +∞ as α falls to −λ_min(C) > 0: no maximum to find.
        raise StageError(
            "the curvature has a negative eigenvalue beyond its rounding, so the Laplace "
            "evidence grows without bound as the prior precision falls to it and has no "
            "maximum; give prior_variance a number instead of auto"
        )
    if not bool(torch.isfinite(evidence(variables)[0])):
        raise StageError(
            "the Laplace evidence is not finite at the spec's prior (the curvature plus the "
            "prior precision is singular); use a proper prior variance to start from"
        )
    point, iterations = ascend(lambda values: evidence(values)[0], variables, max_iterations)
    with torch.no_grad():
        value, log_scale = evidence(point)
    return EvidenceChoice(
        tuple(float(value) for value in torch.exp(point[:count])),
        float(torch.exp(point[count])) if optimise_noise else noise_sd,
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
    noise_sd: float | None = None, per_tensor: bool = False,
) -> tuple[Problem, Any, dict[str, float]]:
    """The evidence of a Laplace state under ``problem``'s normal prior and, with
    ``prior_auto``, the problem and state of the evidence-maximising prior (and noise).

    Args:
        problem: the problem the mode was found under (its prior: the spec's, normal).
        state: a Laplace state at the mode (``params`` and a curvature, :func:`log_det_of`).
        mode: the training data's fit at the mode.
        curvature_name: the method's curvature (sets how C scales with σ).
        prior_auto: choose the prior variance by the evidence: one for every parameter,
            or with ``per_tensor`` one per parameter tensor (laplace-torch's
            ``prior_structure='layerwise'``).
        noise_sd: σ₀ of a gaussian likelihood whose noise is chosen too (with
            ``prior_auto``); None keeps the likelihood.
        per_tensor: one variance per parameter tensor.

    Returns:
        The problem (its prior, and likelihood when σ is chosen, replaced), the state
        (its curvature rescaled to σ) and the metrics: ``log_evidence`` (at the prior the
        posterior uses) and, with ``prior_auto``, ``log_evidence_spec_prior``,
        ``prior_variance_chosen`` (one variance), or ``prior_variance_chosen/<tensor>``
        (per tensor), and ``noise_sd_chosen``.
    """
    from dataclasses import replace

    from bayesflow.likelihoods import gaussian
    from bayesflow.priors import BoundPrior

    params = state.params.detach().to(torch.float64)
    log_det = log_det_of(state)
    dense = None if callable(getattr(state, "log_det", None)) else state.curvature
    if prior_auto and dense is not None and dense.ndim == 2 and bool(torch.isnan(log_det(params.new_zeros(())))):
        raise StageError(_indefinite(dense, curvature_name))
    spec_precision = problem.prior_precision.detach().to(params)
    at_spec = log_evidence(mode.log_likelihood, normal_log_prior(params, spec_precision),
                           problem.dimension, log_det(spec_precision))
    if not prior_auto:
        return problem, state, {"log_evidence": float(at_spec)}
    sizes = [math.prod(shape) for shape in problem.param_shapes]
    groups = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(params.device)
    if not per_tensor:
        groups = torch.zeros_like(groups)
    # Start each group at the spec's prior: its precision's geometric mean over the group.
    count = int(groups.max()) + 1
    log_spec = torch.zeros(count, dtype=torch.float64).index_add_(0, groups.cpu(), torch.log(spec_precision).cpu())
    initial = (log_spec / torch.bincount(groups.cpu(), minlength=count)).exp().tolist()
    choice = maximise_evidence(params, log_det, mode, initial, noise_sd, noise_exponent(curvature_name),
                               groups=groups)
    precision = torch.tensor(choice.prior_precision, dtype=torch.float64, device=params.device)[groups]
    dtype = problem.prior_precision.dtype
    prior = BoundPrior("normal", (1 / precision).to(dtype), precision.to(dtype),
                       float(0.5 * (torch.log(precision) - LOG_2PI).sum()))
    chosen = replace(problem, prior_precision=prior.precision, log_prior=prior.log_prob)
    metrics = {"log_evidence": choice.log_evidence, "log_evidence_spec_prior": float(at_spec)}
    if per_tensor:
        metrics.update({f"prior_variance_chosen/{name}": 1.0 / value
                        for name, value in zip(problem.param_names, choice.prior_precision)})
    else:
        metrics["prior_variance_chosen"] = 1.0 / choice.prior_precision[0]
    if noise_sd is not None and choice.noise_sd is not None:
        likelihood = gaussian(choice.noise_sd)
        chosen = replace(chosen, log_likelihood=likelihood.log_prob, output_hessian=likelihood.output_hessian)
        state = scale_curvature(state, choice.curvature_scale)
        metrics["noise_sd_chosen"] = choice.noise_sd
    return chosen, state, metrics


def _indefinite(curvature: Tensor, curvature_name: str) -> str:
    """Why a curvature with an eigenvalue below −rounding has no evidence maximum, and
    what to do: the cause differs between an exact Hessian and a GGN or Fisher."""
    eigenvalues, _, rounding = semidefinite_eigenvalues(curvature)
    found = (
        f"the {curvature_name or 'dense'} curvature ({curvature.shape[0]} parameters, computed in "
        f"{str(curvature.dtype).removeprefix('torch.')}) has the eigenvalue {float(eigenvalues[0]):.3g}, "
        f"below −{rounding:.3g}, its rounding (d · eps · max|λ|), so the Laplace evidence grows "
        "without bound as the prior precision falls toward it and has no maximum"
    )
    if "hessian" in curvature_name:
        return (f"{found}: the exact Hessian is indefinite at this mode (the likelihood alone is "
                "not convex there); choose the prior with laplace_dense_ggn, which is positive "
                "semi-definite, or give prior_variance a number instead of auto")
    kind = "a GGN" if "ggn" in curvature_name else "a Fisher" if "fisher" in curvature_name else "this curvature"
    return (f"{found}: {kind} is positive semi-definite in exact "
            "arithmetic, so its computation lost more than rounding (a mode with non-finite or "
            "extreme outputs, or a likelihood whose output Hessian is not positive "
            "semi-definite); check the fit's loss and outputs, or give prior_variance a number "
            "instead of auto")
