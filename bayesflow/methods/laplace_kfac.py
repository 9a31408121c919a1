"""Kronecker-factored (KFAC) Laplace approximations around a mode, two curvatures.

Around a mode θ* (``from:`` a MAP or MLE method) each layer's block of the curvature is a
Kronecker product (:mod:`bayesflow.engines.kfac`)::

    C_W ≈ G ⊗ A   (a weight, out × in),    C_b = G   (its bias)
    Λ = C + c · δ                          (full-data precision, δ the tensor's prior precision)
    q(θ) = N(θ*, T · Λ⁻¹)                  (block diagonal over the layers' tensors)

- ``laplace_kfac_ggn``: G from the generalised Gauss-Newton matrix, exactly (one backward
  pass per output of the network, not Monte Carlo sampled);
- ``laplace_kfac_fisher``: G from the per-example gradients of the log likelihood (the
  empirical Fisher).

References: KFAC (Martens & Grosse, 2015, https://arxiv.org/abs/1503.05671); the Kronecker
Laplace (Ritter et al., 2018, https://openreview.net/forum?id=Skdvd2xAZ); laplace-torch
(Daxberger et al., 2021, https://arxiv.org/abs/2106.14806), whose ``hessian_structure=
"kron"`` is the same approximation (checked in ``tests/engines/test_laplace_kfac.py``).

The covariance is never formed: the eigendecompositions of A and G give draws, the exact
marginal variances (the posterior's ``var``) and the log density
(:mod:`bayesflow.engines.kronecker`); ``posterior.npz`` stores the eigenbases beside
``mean`` and ``var``. With ``parameters:`` (for example ``["fc.*"]``) it is a last-layer
KFAC Laplace. On a language model (``likelihood: next_token``) ``laplace_kfac_fisher``
takes the layers of :mod:`bayesflow.llm.kfac`: the trainable ``nn.Linear`` layers (LoRA
adapters or projections), every position of a window a row, G from the gradient of the
window's scored-token log likelihood; its posterior and evidence are the same
``KroneckerCovariance`` and log det. ``laplace_kfac_ggn`` is refused there (a backward
pass per class of the vocabulary). On multiple-choice questions (``likelihood:
multiple_choice``, Laplace-LoRA) both run, over the same layers with each question one datum
and the prompts' left padding in neither factor
(:func:`bayesflow.llm.kfac.choice_kfac_layers`; equal to laplace-torch's kron Laplace,
``tests/llm/test_choice_kfac.py``). Every inferred tensor must be the weight or bias of an ``nn.Linear`` or
``nn.Conv2d`` (no diagonal fallback: the engine refuses the others and says how to leave
them out), and the prior must have one precision per tensor.

Temperature as every Laplace method (:mod:`bayesflow.methods.laplace`): covariance
``T · Λ⁻¹`` with ``c = tempering.prior_weight``; ``T = 0`` is a point mass at θ*; the
curvature (the sums ``Σ aaᵀ``, G and the row counts) does not depend on T, so one pass
per seed serves every temperature. ``log det Λ`` is
:func:`bayesflow.engines.kfac.log_det_precision`.

Evidence: the state (:class:`KfacState`) gives the Laplace evidence its
``log_det(prior_precision) = Σ log(γₚ αₑ + δ)`` over the blocks (one prior precision for
every parameter, or one per tensor, differentiable in it) and ``scaled(factor)`` (the
curvature of another noise sd: the G factors scaled), so a KFAC fit logs
``log_evidence`` and takes ``prior_variance: auto | auto_per_tensor`` and ``noise_sd: auto``
as every Laplace does (:mod:`bayesflow.engines.evidence`); the posterior reads the prior
precision of the problem it is built on, the evidence-chosen one included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from bayesflow.methods.laplace import LaplaceBase, _laplace

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.engines.evidence import LogDet
    from bayesflow.engines.kfac import FactorKind, Layers
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "KfacState", "LaplaceKfacFisherSpec", "LaplaceKfacGGNSpec", "build_kfac"]


class LaplaceKfacGGNSpec(LaplaceBase):
    """Kronecker-factored Laplace with the generalised Gauss-Newton curvature, around `from`."""

    engine: Literal["laplace_kfac_ggn"] = Field(description="Registry name of the engine.")


class LaplaceKfacFisherSpec(LaplaceBase):
    """Kronecker-factored Laplace with the empirical Fisher curvature, around `from`."""

    engine: Literal["laplace_kfac_fisher"] = Field(description="Registry name of the engine.")


class KfacState(NamedTuple):
    """The state of a KFAC Laplace fit.

    Attributes:
        params: the mode θ* (d,).
        curvature: every layer's Σ aaᵀ, G and row count R summed over the examples seen
            so far, packed flat (:func:`bayesflow.engines.kfac.factor_size`).
        layers: the layers the factors belong to (what unpacks them).
    """

    params: Tensor
    curvature: Tensor
    layers: Layers

    @property
    def log_det(self) -> LogDet:
        """``p -> log det(C + diag p)``, the curvature's eigendecomposition done once per
        access (:func:`bayesflow.engines.kfac.kronecker_log_det`); called as a method,
        ``state.log_det(p)``, it is the number."""
        from bayesflow.engines.kfac import kronecker_log_det

        return kronecker_log_det(self.layers, self.curvature)

    def scaled(self, factor: float) -> KfacState:
        """The state of the curvature ``factor · C`` (the curvature at another noise sd):
        every layer's G, which its weight's ``G ⊗ A`` and its bias's G share, times
        ``factor``; Σ aaᵀ and R as they are."""
        from bayesflow.engines.kfac import unpack

        curvature = self.curvature.clone()
        for _, outputs, _ in unpack(self.layers, curvature):
            outputs.mul_(factor)  # a view into `curvature`
        return self._replace(curvature=curvature)


def build_kfac(
    name: str, kind: FactorKind, problem: Problem, tempering: Tempering, config: LaplaceBase
) -> Engine:
    """A KFAC Laplace engine ``N(θ*, T · (G ⊗ A + c·δ)⁻¹)`` layer by layer.

    Raises:
        StageError: a parameter tensor is not in a Linear or Conv2d layer, or the prior's
            precision varies within a tensor.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.kfac import (
        accumulate_factors,
        check_prior,
        factor_size,
        kfac_layers,
        kronecker_posterior,
    )
    own = None if problem.observation is None else problem.observation.kfac_layers(name, kind, problem)
    layers = kfac_layers(problem, name) if own is None else own
    size = factor_size(layers)
    temperature, prior_weight = tempering.temperature, tempering.prior_weight
    check_prior(problem, layers)  # at build, not after a curvature pass

    def init(params: Tensor, generator: torch.Generator) -> KfacState:
        # Deterministic: the generator is unused.
        params = params.detach().clone()
        return KfacState(params, params.new_zeros(size), layers)

    def update(state: KfacState, batch: Batch) -> tuple[KfacState, dict[str, Tensor]]:
        total = state.curvature + accumulate_factors(problem, layers, state.params, batch, kind)
        with torch.no_grad():
            loss = -problem.log_posterior(state.params, batch, prior_weight=prior_weight)
        return state._replace(curvature=total), {"loss": loss}

    def posterior(state: KfacState) -> Posterior:
        if temperature == 0:
            return Posterior(mean=state.params, var=torch.zeros_like(state.params))
        kronecker = kronecker_posterior(
            name, problem, layers, state.curvature, temperature, prior_weight
        )
        var = kronecker.variance(problem.dimension, state.params)
        return Posterior(mean=state.params, var=var, kronecker=kronecker)

    return Engine(init, update, posterior, 1, config.batch_size)


def build_ggn(problem: Problem, tempering: Tempering, config: LaplaceKfacGGNSpec) -> Engine:
    """KFAC GGN Laplace: G from the output Hessians' square roots, exactly."""
    return build_kfac("laplace_kfac_ggn", "ggn", problem, tempering, config)


def build_fisher(problem: Problem, tempering: Tempering, config: LaplaceKfacFisherSpec) -> Engine:
    """KFAC empirical-Fisher Laplace: G from the per-example log-likelihood gradients."""
    return build_kfac("laplace_kfac_fisher", "fisher", problem, tempering, config)


METHODS = (
    _laplace("laplace_kfac_ggn", LaplaceKfacGGNSpec, build_ggn),
    _laplace("laplace_kfac_fisher", LaplaceKfacFisherSpec, build_fisher),
)
