"""Laplace approximations around a mode (``from:`` a MAP or MLE method), five curvatures.

Around a mode θ* (the posterior mean of the method named by ``from:``) the log target is
expanded to second order, with the Hessian of the negative log likelihood replaced by a
curvature C summed over the training data (:mod:`bayesflow.engines.curvature`)::

    Λ = C + c · prior_precision                          (full-data precision)
    q(θ) = N(θ*, T · Λ⁻¹)                                (diagonal C: diag(T / Λ))

- ``laplace_diag_ggn``: the diagonal of the generalised Gauss-Newton matrix,
  ``C = Σᵢ diag(Jᵢᵀ Hᵢ Jᵢ)``;
- ``laplace_diag_fisher``: the diagonal empirical Fisher, ``C = Σᵢ gᵢ ⊙ gᵢ``;
- ``laplace_dense_ggn``: the generalised Gauss-Newton matrix, ``C = Σᵢ Jᵢᵀ Hᵢ Jᵢ``;
- ``laplace_dense_fisher``: the empirical Fisher, ``C = Σᵢ gᵢ gᵢᵀ``;
- ``laplace_dense_hessian``: the exact Hessian, ``C = −∇² Σᵢ log p(yᵢ|xᵢ,θ*)``
  (forward-over-reverse AD),

with ``Jᵢ = ∂ forward(θ*, xᵢ)/∂θ``, ``Hᵢ = −∂² log p(yᵢ|oᵢ)/∂oᵢ²`` and
``gᵢ = ∇θ log p(yᵢ|xᵢ,θ*)``. References: the textbook Laplace approximation (MacKay,
1992; Tierney & Kadane, 1986); the GGN (Martens, 2020, https://arxiv.org/abs/1412.1193;
Immer et al., 2021, https://arxiv.org/abs/2008.08400); Laplace for deep networks
(Daxberger et al., 2021, https://arxiv.org/abs/2106.14806); the posteriors library's
``laplace`` module (Duffield et al., 2025, https://arxiv.org/abs/2406.00104).

- The GGN is the Hessian of the network linearised at θ*, positive semi-definite
  everywhere; for the likelihoods here it is also the Fisher of the model's predictive,
  and it pairs naturally with ``prediction: linearized``. For a model linear in θ with a
  Gaussian likelihood it is the exact Hessian, so the approximation is exact.
- The empirical Fisher uses the observed targets instead of the model's predictive: it
  needs no output Hessian, but only estimates the Fisher at a mode and can be far off
  for a misspecified model (Kunstner et al., 2019, https://arxiv.org/abs/1905.12558).
- The Hessian is positive semi-definite only at a minimum of the negative log
  likelihood; away from a mode Λ may be indefinite, and the engine then says so.
- On a language model (``likelihood: next_token``, outputs (n, S, V)) an example is a
  window of S scored tokens and a GGN pass per class is out of reach at V = 32k–128k: the
  two diagonal methods sum one term per scored token instead
  (:mod:`bayesflow.llm.curvature`): ``laplace_diag_fisher`` the empirical Fisher
  ``Σ_t g_t ⊙ g_t``, ``laplace_diag_ggn`` the GGN estimated with one token per position
  drawn from the model (an unbiased estimate of its diagonal, the same cost). The dense
  methods are refused there.
- Dense covariances are d × d: models above
  :data:`~bayesflow.engines.base.DENSE_DIMENSION_LIMIT` parameters are refused.

Temperature: the tempered target ``exp(−U(θ)/T)`` has precision ``Λ / T`` when
``c = tempering.prior_weight`` (1 when the whole posterior is tempered, ``T`` when only
the likelihood is), so the covariance is ``T · Λ⁻¹``; equivalently ``𝒯 · (Λ / N)⁻¹``
with the per-datum precision ``Λ / N``. ``T = 0`` gives a point mass at θ*. The
curvature does not depend on T, so every temperature of a seed shares one curvature
pass (a Laplace posterior at T is the same curvature rescaled); how a method predicts
(``prediction``) does not change it either. One pass over the training data accumulates
C; the minibatches only bound memory.

Evidence: every Laplace fit under a normal prior logs ``log_evidence``, the Laplace log
marginal likelihood of the *untempered* model, ``log p(D|θ*) + log p(θ*) + (d/2) log 2π −
½ log det(C + prior_precision)`` (T does not enter). ``prior_variance: auto`` builds the
posterior above on the prior variance that maximises it at θ* (and ``noise_sd: auto`` on
the noise), θ* staying the mode found under the spec's prior; the fit stage does this
(:func:`bayesflow.stages.fit.laplace_evidence`, :mod:`bayesflow.engines.evidence`,
:mod:`bayesflow.engines.evidence_prior`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field, PositiveInt

from bayesflow.errors import StageError
from bayesflow.methods.base import PREDICTION_DESCRIPTION, Method, MethodBase, Prediction, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import Tempering

__all__ = [
    "EVIDENCE_PRIORS",
    "METHODS",
    "LaplaceBase",
    "LaplaceDenseFisherSpec",
    "LaplaceDenseGGNSpec",
    "LaplaceDenseHessianSpec",
    "LaplaceDiagFisherSpec",
    "LaplaceSpec",
    "LaplaceState",
    "build",
    "build_laplace",
    "per_datum",
]

Curvature = Callable[["Problem", "Tensor", "Batch"], "Tensor"]

# The priors (`prior.name`) whose Laplace evidence is logged and that `prior_variance: auto`
# may replace: the normal ones (the evidence's closed form needs a Gaussian prior).
EVIDENCE_PRIORS = frozenset({"diag_normal", "he_normal"})


class LaplaceBase(MethodBase):
    """Fields shared by the Laplace approximations."""

    batch_size: PositiveInt | None = Field(
        256, description="Minibatch size of the curvature pass; null for full batch."
    )
    prediction: Prediction = Field("sampled", description=PREDICTION_DESCRIPTION)
    prior_variance: Literal["spec", "auto", "auto_per_tensor", "validation"] = Field(
        "spec",
        description="The prior of the Laplace posterior: `spec`, the spec's `prior` (the one "
        "the `from` mode was found under); `auto`, one variance for every parameter chosen at "
        "the mode to maximise the Laplace evidence (empirical Bayes, as laplace-torch's "
        "post-hoc `optimize_prior_precision(method='marglik')`; the mode is not refitted), "
        "logged as `prior_variance_chosen`; `auto_per_tensor`, one variance per parameter "
        "tensor (laplace-torch's `prior_structure='layerwise'`), logged as "
        "`prior_variance_chosen/<tensor>`; `validation`, one variance from a grid (precisions "
        "10^-4 to 10^4, 17 a decade apart in halves) whose predictive (`evaluate.n_samples` members, one seeded draw) has "
        "the lowest NLL on the validation rows (Laplace-LoRA's `val` option, laplace-torch's "
        "`optimize_prior_precision(method='gridsearch')`), logged as `prior_variance_chosen` "
        "and `val_nll_prior_chosen`; needs validation data. Needs a normal prior (diag_normal "
        "or he_normal).",
    )
    noise_sd: Literal["spec", "auto"] = Field(
        "spec",
        description="For a gaussian likelihood with `prior_variance: auto` (or "
        "`auto_per_tensor`): `auto` chooses the "
        "noise sd with the prior by the evidence (logs `noise_sd_chosen`) and the posterior's "
        "curvature is rescaled to it; `spec` keeps `likelihood.noise_sd`. The evaluation's "
        "regression predictive adds the noise the posterior was built on (the chosen one "
        "with `auto`).",
    )


class LaplaceSpec(LaplaceBase):
    """Diagonal Laplace with the generalised Gauss-Newton curvature, around `from`."""

    engine: Literal["laplace_diag_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDiagFisherSpec(LaplaceBase):
    """Diagonal Laplace with the empirical Fisher curvature, around `from`."""

    engine: Literal["laplace_diag_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseFisherSpec(LaplaceBase):
    """Dense Laplace with the empirical Fisher curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_fisher"] = Field(description="Registry name of the engine.")


class LaplaceDenseGGNSpec(LaplaceBase):
    """Dense Laplace with the generalised Gauss-Newton curvature, around `from` (small models)."""

    engine: Literal["laplace_dense_ggn"] = Field(description="Registry name of the engine.")


class LaplaceDenseHessianSpec(LaplaceBase):
    """Dense Laplace with the exact Hessian, around `from` (small models)."""

    engine: Literal["laplace_dense_hessian"] = Field(description="Registry name of the engine.")


def build_laplace(
    name: str,
    problem: Problem,
    tempering: Tempering,
    config: LaplaceBase,
    curvature: Curvature,
    diagonal: str | None = None,
) -> Engine:
    """A Laplace engine ``N(θ*, T · (C + c·prior_precision)⁻¹)`` for a curvature C.

    Args:
        name: the engine's registry name, for messages.
        problem: the model, likelihood, prior and data size.
        tempering: the temperature T and the convention, which sets the prior weight c.
        config: the method's spec (its ``batch_size`` bounds the curvature pass's memory).
        curvature: ``(problem, θ*, batch) -> C`` summed over the batch's examples.
        diagonal: None when C is diagonal (d,) and the posterior has ``var``; for a dense
            C (d, d) and a posterior with ``cov``, the diagonal engine to suggest when the
            model is too large for it.

    Raises:
        StageError: for a dense approximation of a model with too many parameters.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior, check_dense_dimension, dense_inverse

    dense = diagonal is not None
    if diagonal is not None:
        if problem.observation is not None and not problem.observation.dense_curvature:
            raise StageError(
                f"{name}: a {problem.likelihood} likelihood's curvature is taken per datum "
                "(a language model's scored token), diagonal or Kronecker-factored only: use "
                f"{diagonal} or a KFAC Laplace"
            )
        check_dense_dimension(name, problem, diagonal)
    temperature, prior_weight = tempering.temperature, tempering.prior_weight

    def init(params: Tensor, generator: torch.Generator) -> LaplaceState:
        # Deterministic: the generator is unused.
        params = params.detach().clone()
        size = (params.shape[0], params.shape[0]) if dense else (params.shape[0],)
        return LaplaceState(params, params.new_zeros(size))

    def update(state: LaplaceState, batch: Batch) -> tuple[LaplaceState, dict[str, Tensor]]:
        total = state.curvature + curvature(problem, state.params, batch).detach()
        with torch.no_grad():
            loss = -problem.log_posterior(state.params, batch, prior_weight=prior_weight)
        return LaplaceState(state.params, total), {"loss": loss}

    def posterior(state: LaplaceState) -> Posterior:
        prior = prior_weight * problem.prior_precision
        if not dense:
            if temperature == 0:
                return Posterior(mean=state.params, var=torch.zeros_like(state.params))
            precision = state.curvature + prior
            check_precision(name, precision, problem)
            return Posterior(mean=state.params, var=temperature / precision)
        if temperature == 0:
            return Posterior(mean=state.params, cov=torch.zeros_like(state.curvature))
        precision = state.curvature + torch.diag(prior)
        return Posterior(mean=state.params, cov=temperature * dense_inverse(name, precision))

    return Engine(init, update, posterior, 1, config.batch_size)


def build(problem: Problem, tempering: Tempering, config: LaplaceSpec) -> Engine:
    """Diagonal GGN Laplace ``N(θ*, diag(T / (Σᵢ diag(JᵢᵀHᵢJᵢ) + c·prior_precision)))``."""
    from bayesflow.engines.curvature import diagonal_ggn

    curvature = per_datum("diag_ggn", problem, diagonal_ggn)
    return build_laplace("laplace_diag_ggn", problem, tempering, config, curvature)


def build_diag_fisher(
    problem: Problem, tempering: Tempering, config: LaplaceDiagFisherSpec
) -> Engine:
    """Diagonal empirical-Fisher Laplace ``N(θ*, diag(T / (Σᵢ gᵢ² + c·prior_precision)))``."""
    from bayesflow.engines.curvature import diagonal_fisher

    curvature = per_datum("diag_fisher", problem, diagonal_fisher)
    return build_laplace("laplace_diag_fisher", problem, tempering, config, curvature)


def build_dense_fisher(
    problem: Problem, tempering: Tempering, config: LaplaceDenseFisherSpec
) -> Engine:
    """Dense empirical-Fisher Laplace ``N(θ*, T · (Σᵢ gᵢgᵢᵀ + c·diag(prior_precision))⁻¹)``.

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    from bayesflow.engines.curvature import dense_fisher

    return build_laplace(
        "laplace_dense_fisher", problem, tempering, config, dense_fisher, "laplace_diag_fisher"
    )


def build_dense_ggn(problem: Problem, tempering: Tempering, config: LaplaceDenseGGNSpec) -> Engine:
    """Dense GGN Laplace ``N(θ*, T · (Σᵢ JᵢᵀHᵢJᵢ + c·diag(prior_precision))⁻¹)``.

    Raises:
        StageError: when the model has more parameters than a dense method allows.
    """
    from bayesflow.engines.curvature import dense_ggn

    return build_laplace(
        "laplace_dense_ggn", problem, tempering, config, dense_ggn, "laplace_diag_ggn"
    )


def build_dense_hessian(
    problem: Problem, tempering: Tempering, config: LaplaceDenseHessianSpec
) -> Engine:
    """Dense Hessian Laplace ``N(θ*, T · (−∇² Σᵢ log p(yᵢ|xᵢ,θ*) + c·diag(prior_precision))⁻¹)``.

    Raises:
        StageError: when the model has more parameters than a dense method allows, or
            when the precision is not positive definite (θ* is not a mode).
    """
    from bayesflow.engines.curvature import dense_hessian

    return build_laplace(
        "laplace_dense_hessian", problem, tempering, config, dense_hessian, "laplace_diag_ggn"
    )


def per_datum(kind: str, problem: Problem, curvature: Curvature) -> Curvature:
    """``curvature`` (one term per example), or the likelihood's own diagonal curvature
    ``kind`` when its data points are not the rows (a language model's scored tokens:
    :meth:`bayesflow.likelihoods.Likelihood.diagonal_curvature`)."""
    observation = problem.observation
    own = None if observation is None else observation.diagonal_curvature(kind, problem)
    return curvature if own is None else own


class LaplaceState(NamedTuple):
    """The state of a Laplace fit.

    Attributes:
        params: the mode θ* (d,).
        curvature: the curvature summed over the examples seen so far: (d,) for a
            diagonal approximation, (d, d) for a dense one.
    """

    params: Tensor
    curvature: Tensor


def check_precision(name: str, precision: Tensor, problem: Problem) -> None:
    """Raise when a parameter has no curvature and no prior, so an infinite variance."""
    flat = precision <= 0
    if bool(flat.any()):
        count = int(flat.sum())
        index = int(flat.nonzero()[0])
        raise StageError(
            f"{name}: {count} of {problem.dimension} parameters have zero "
            f"posterior precision (the first is {locate(problem, index)}): the data do not "
            "constrain them and there is no prior, so their variance would be infinite. "
            "Use a proper prior, for example `prior: {name: diag_normal}`."
        )


def locate(problem: Problem, index: int) -> str:
    """Name a flat index as ``tensor_name[position]``."""
    for name, shape in zip(problem.param_names, problem.param_shapes):
        size = math.prod(shape)
        if index < size:
            return f"{name}[{index}]"
        index -= size
    return f"flat index {index}"


# Settings that leave the curvature pass as it is: how the posterior predicts, and the
# post-hoc prior and noise the evidence chooses from that curvature.
POSTHOC_FIELDS = frozenset({"prediction", "prior_variance", "noise_sd"})


def _laplace(name: str, spec: type[LaplaceBase], build: Callable[..., Engine]) -> Method:
    traits = Traits(needs_mode=True, curvature=name.removeprefix("laplace_"), posterior="gaussian",
                    prediction_fields=POSTHOC_FIELDS)
    return Method(name, spec, traits, build)


METHODS = (
    _laplace("laplace_diag_ggn", LaplaceSpec, build),
    _laplace("laplace_diag_fisher", LaplaceDiagFisherSpec, build_diag_fisher),
    _laplace("laplace_dense_fisher", LaplaceDenseFisherSpec, build_dense_fisher),
    _laplace("laplace_dense_ggn", LaplaceDenseGGNSpec, build_dense_ggn),
    _laplace("laplace_dense_hessian", LaplaceDenseHessianSpec, build_dense_hessian),
)
