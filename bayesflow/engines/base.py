"""What every engine shares: the problem it is given, its functions, its posterior.

Engines are pure. ``build(problem, tempering, config)`` binds hyper-parameters and returns
an :class:`Engine`, a NamedTuple of functions over an explicit state::

    state = engine.init(params, generator)
    state, aux = engine.update(state, batch)      # once per minibatch
    posterior = engine.posterior(state)

A batch is ``(inputs, targets)`` shared by every chain of the state, or a
:class:`ChainBatch` that holds one minibatch per chain (``engine.streams`` > 1: each
chain's own shuffled order, see :mod:`bayesflow.engines.fit`).

Engines never log, write files or read YAML; the fit stage drives them and tracks
what they return in ``aux``. The optimising engines (``map``, ``mle``, ``deep_ensemble``,
``vi_*``) update their state's tensors in place (copied once in ``init``; see
:mod:`bayesflow.engines.optimize`), and so do ``sghmc`` and ``sgld`` (the gradient's
buffer reused for the noise): a state given to their ``update`` is consumed. Copy a
state's tensors to keep them (their kept samples are copies already).

:func:`linearized_outputs` is the Gaussian posteriors' second predictive: parameter
samples pushed through the network linearised around the posterior mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.func import jvp, vmap

from bayesflow.engines.kronecker import KroneckerCovariance
from bayesflow.errors import StageError

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "DENSE_DIMENSION_LIMIT",
    "Batch",
    "ChainBatch",
    "Engine",
    "EngineBuilder",
    "Observation",
    "Posterior",
    "Problem",
    "check_dense_dimension",
    "covariance_root",
    "dense_inverse",
    "linearized_outputs",
]

# Dense methods hold d × d matrices and factorise them. At d = 4,096 a float32 matrix is
# 64 MiB and one Cholesky factorisation plus inverse took 2.1 s on one core of the 2-core
# development machine (measured), so a dense EKF step (two of them) takes seconds.
DENSE_DIMENSION_LIMIT = 4096

Batch = tuple[Tensor, Tensor]


class ChainBatch(NamedTuple):
    """One minibatch per chain: chain k's inputs are ``inputs[k]``, its targets ``targets[k]``.

    Produced by :func:`~bayesflow.engines.fit.minibatches` for an engine with
    ``streams`` > 1 (independent minibatch orders); an engine tells it from a plain
    ``(inputs, targets)`` batch, which every chain shares, by its type.

    Attributes:
        inputs: (K, B, ...) inputs.
        targets: (K, B, ...) targets.
    """

    inputs: Tensor
    targets: Tensor


class Observation(Protocol):
    """What the engines ask of a likelihood beyond ``log p`` (the hooks of
    :class:`bayesflow.likelihoods.Likelihood`; a language model's datum is a scored token)."""

    @property
    def name(self) -> str:
        """The registry name."""

    @property
    def dense_curvature(self) -> bool:
        """Whether a dense curvature per datum is tractable."""

    @property
    def continual_curvature(self) -> str:
        """The diagonal curvature a continual update sums."""

    def data_points(self, targets: Any) -> int:
        """How many data points a target array holds."""

    def diagonal_curvature(self, kind: str, problem: Any) -> Any:
        """The likelihood's own diagonal curvature ``kind``, or None for the per-example one."""

    def kfac_layers(self, engine: str, kind: str, problem: Any) -> Any:
        """The layers its KFAC covers, or None for the network's own."""


@dataclass(frozen=True)
class Problem:
    """A model, likelihood, prior and data size, seen in flat parameter space.

    Attributes:
        forward: ``(params (d,), inputs (n, ...)) -> outputs (n, k)``; raw model outputs
            (logits for classification, means for regression).
        log_likelihood: ``(outputs (n, k), targets (n,)) -> (n,)`` per-example log p(y|x,θ).
        output_hessian: ``outputs (n, k) -> (n, k, k)``, the Hessian of −log p(y|x, θ) in the
            outputs (the middle factor of the generalised Gauss-Newton matrix).
        log_prior: ``params (d,) -> ()``; zero for maximum likelihood.
        prior_precision: ``(d,)`` the prior's diagonal precision (0 where there is none).
        num_data: N, the number of training points.
        dimension: d.
        param_names, param_shapes: the tensors a flat vector is made of, in order.
        init_params: ``generator -> params (d,)``, the model's own initialisation.
        likelihood: the likelihood's registry name (logged, and read by the evidence).
        device: where parameters and data live.
        observation: the :class:`~bayesflow.likelihoods.Likelihood` itself, which says what
            differs by likelihood (how many data points a target array holds, a per-datum
            curvature); None for a hand-built problem (one data point per target row).
        module: the ``nn.Module`` that ``forward`` calls with the flat vector unflattened
            (a registered or ``python:`` network; layer-wise methods read its layers), or
            the language model whose trainable tensors the vector holds; None for a plain
            function.
        parent: for a problem restricted to a subset of tensors (:mod:`bayesflow.subset`),
            the full problem and the :class:`~bayesflow.subset.Embedding` of the subset
            into it; None otherwise.
        logits: a language model's ``(params, windows (n, L), keep) -> (n, keep, V)``
            float32 logits of the last ``keep`` positions (a keyword ``at``, (windows,
            positions) index tensors into them, keeps only those: (P, V)); None for other
            models.
        without_last: a language model's scored logits computed from the windows without
            their last token (which no scored logit reads); None for other models.
    """

    forward: Callable[[Tensor, Tensor], Tensor]
    log_likelihood: Callable[[Tensor, Tensor], Tensor]
    output_hessian: Callable[[Tensor], Tensor]
    log_prior: Callable[[Tensor], Tensor]
    prior_precision: Tensor
    num_data: int
    dimension: int
    param_names: tuple[str, ...]
    param_shapes: tuple[tuple[int, ...], ...]
    init_params: Callable[[torch.Generator], Tensor]
    likelihood: str = "categorical"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    observation: Observation | None = None
    module: nn.Module | None = None
    parent: tuple[Problem, Any] | None = None
    logits: Callable[..., Tensor] | None = None
    without_last: Callable[[Tensor, Tensor], Tensor] | None = None

    def data_points(self, targets: Tensor) -> int:
        """How many data points ``targets`` holds (rows; a language model's scored tokens)."""
        if self.observation is None:
            return int(targets.shape[0])
        return self.observation.data_points(targets)

    def log_posterior(self, params: Tensor, batch: Batch, prior_weight: float = 1.0) -> Tensor:
        """Per-datum normalised log posterior ``mean log p(y|x,θ) + c·log p(θ)/N``."""
        inputs, targets = batch
        outputs = self.forward(params, inputs)
        log_lik = self.log_likelihood(outputs, targets).mean()
        return log_lik + prior_weight * self.log_prior(params) / self.num_data


@dataclass
class Posterior:
    """A posterior in flat parameter space, as saved in ``posterior/posterior.npz``.

    Exactly one form is set: ``samples`` (S, d); or ``mean`` (d,) with ``var`` (d,) or
    ``cov`` (d, d). A point estimate (MAP, MLE) is ``mean`` with ``var`` of zeros. A
    Kronecker-factored Gaussian (KFAC Laplace) has ``mean``, ``var`` (its exact marginal
    variances) and ``kronecker``, its covariance, which draws use
    (:mod:`bayesflow.engines.kronecker`).
    """

    samples: Tensor | None = None
    mean: Tensor | None = None
    var: Tensor | None = None
    cov: Tensor | None = None
    kronecker: KroneckerCovariance | None = None

    @property
    def kind(self) -> str:
        """``"samples"`` or ``"gaussian"``."""
        return "samples" if self.samples is not None else "gaussian"

    def sample(self, count: int, generator: torch.Generator) -> Tensor:
        """Draw ``count`` parameter vectors (count, d); sample sets are subsampled evenly."""
        if self.samples is not None:
            total = self.samples.shape[0]
            if count >= total:
                return self.samples
            index = torch.linspace(0, total - 1, count).round().long()
            return self.samples[index]
        assert self.mean is not None
        noise = torch.randn(
            (count, self.mean.shape[0]),
            generator=generator,
            dtype=self.mean.dtype,
            device=generator.device,
        ).to(self.mean.device)
        if self.cov is not None:
            return self.mean + noise @ covariance_root(self.cov).T
        if self.kronecker is not None:
            return self.mean + self.kronecker.deviations(noise)
        assert self.var is not None
        return self.mean + noise * self.var.sqrt()

    def to_arrays(self, problem: Problem) -> dict[str, np.ndarray]:
        """The arrays of the ``posterior.npz`` contract (docs/design.md, "Contracts")."""
        arrays: dict[str, np.ndarray] = {
            "param_names": np.array(problem.param_names),
            "param_shapes": np.array(
                ["x".join(map(str, s)) or "scalar" for s in problem.param_shapes]
            ),
        }
        for name in ("samples", "mean", "var", "cov"):
            value = getattr(self, name)
            if value is not None:
                arrays[name] = value.detach().cpu().numpy()
        if self.kronecker is not None:
            arrays.update(self.kronecker.to_arrays())
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Posterior:
        """Inverse of :meth:`to_arrays` (tensors on the CPU)."""
        values = {
            name: torch.as_tensor(arrays[name])
            for name in ("samples", "mean", "var", "cov")
            if name in arrays
        }
        return cls(**values, kronecker=KroneckerCovariance.from_arrays(arrays))


def covariance_root(cov: Tensor) -> Tensor:
    """A square root R with ``R Rᵀ = cov``, for drawing ``mean + R ε``.

    The Cholesky factor; for a singular ``cov`` (a point mass at T = 0, a collapsed
    direction), ``V √Λ`` from its eigendecomposition with negative rounding clamped to 0.
    """
    factor, info = torch.linalg.cholesky_ex(cov)
    if int(info) == 0:
        return factor
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)
    return eigenvectors * eigenvalues.clamp(min=0).sqrt().unsqueeze(-2)


def linearized_outputs(
    problem: Problem,
    posterior: Posterior,
    inputs: Tensor,
    n_samples: int,
    generator: torch.Generator,
    chunk: int = 64,
) -> Tensor:
    """Outputs of the network linearised around the posterior mean, for sampled parameters.

    The GLM predictive of Immer et al. (2021, https://arxiv.org/abs/2008.08400):
    ``f_lin(x, θₛ) = f(x, μ) + J(x)(θₛ − μ)`` with ``J(x) = ∂f(x, μ)/∂θ`` and
    ``θₛ ~ posterior``. Each ``J(x)(θₛ − μ)`` is one Jacobian-vector product
    (``torch.func.jvp``), vmapped over the samples of a chunk and applied to the inputs a
    chunk of rows at a time; J itself is never formed.
    For a model linear in θ it equals the sampled predictive exactly.

    Args:
        problem: the flat-parameter problem whose ``forward`` is linearised.
        posterior: a Gaussian posterior (``mean`` with ``var`` or ``cov``).
        inputs: (n, ...) inputs.
        n_samples: S, the parameter samples drawn (with ``posterior.sample``).
        generator: the source of the samples.
        chunk: samples per vmapped call at most. Fewer samples, and the inputs in chunks of
            rows, are taken at once as the memory budget requires (see
            :mod:`bayesflow.engines.memory`; ``BAYESFLOW_MEMORY_LIMIT`` sets it).

    Returns:
        (S, n, k) outputs on the problem's device, without gradients.

    Raises:
        ValueError: for a sample-based posterior, which has no mean to linearise around.
        StageError: not even one sample on one input fits the memory budget.
    """
    if posterior.mean is None:
        raise ValueError(
            "linearized prediction needs a Gaussian posterior (a mean with var or cov), "
            "got samples; use `prediction: sampled` for this method"
        )
    mean = posterior.mean.to(problem.device)
    inputs = inputs.to(problem.device)
    samples = posterior.sample(n_samples, generator).to(problem.device)
    with torch.no_grad():
        first = problem.forward(mean, inputs[:1])
    result = first.new_empty((samples.shape[0], inputs.shape[0], *first.shape[1:]))
    if result.numel() == 0:
        return result
    per_samples, per_rows = _linearized_chunks(problem, mean, inputs, result, chunk)

    def tangent_at(rows: Tensor) -> Callable[[Tensor], Tensor]:
        def tangent(direction: Tensor) -> Tensor:
            return jvp(lambda params: problem.forward(params, rows), (mean,), (direction,))[1]

        return tangent

    with torch.no_grad():
        for start in range(0, inputs.shape[0], per_rows):
            rows = inputs[start : start + per_rows]
            block = result[:, start : start + per_rows]
            block.copy_(problem.forward(mean, rows).expand_as(block))
            tangent = vmap(tangent_at(rows))
            for begin in range(0, samples.shape[0], per_samples):
                piece = samples[begin : begin + per_samples] - mean
                block[begin : begin + per_samples] += tangent(piece)
    return result


# A Jacobian-vector product carries a tangent beside every activation, and its rules make
# temporaries of about the same size: a sample's tangents cost about this many forward passes.
TANGENT_FACTOR = 3


def _linearized_chunks(
    problem: Problem, mean: Tensor, inputs: Tensor, result: Tensor, chunk: int
) -> tuple[int, int]:
    """Samples and rows per vmapped Jacobian-vector product, within the memory budget.

    A chunk of ``s`` samples over ``r`` rows holds the forward pass on the rows at the mean
    and ``s`` tangents of it (:data:`TANGENT_FACTOR` forward passes each), besides the
    (S, n, k) result and the chunk's parameter differences. Starting from ``chunk``
    samples, the sample count is halved until at least one row fits.

    Raises:
        StageError: not even one sample on one row fits (names ``BAYESFLOW_MEMORY_LIMIT``).
    """
    from bayesflow.engines.memory import memory_budget, row_cost, rows_within

    cost = row_cost(problem.forward, lambda rows: problem.forward(mean, rows), inputs)
    budget = memory_budget(problem.device)
    held = result.numel() * result.element_size()
    samples = max(1, min(chunk, result.shape[0]))
    while True:
        fixed = held + cost.fixed * (1 + TANGENT_FACTOR * samples) + samples * mean.numel() * mean.element_size()
        per_row = cost.per_row * (1 + TANGENT_FACTOR * samples)
        try:
            rows = rows_within(budget, fixed, per_row, inputs.shape[0], "the linearised predictive")
        except StageError:
            if samples == 1:
                raise
            samples = max(1, samples // 2)
            continue
        return samples, rows


def check_dense_dimension(engine: str, problem: Problem, diagonal: str) -> None:
    """Refuse a dense method on a model too large for a d × d covariance.

    Args:
        engine: the dense engine's name, for the message.
        problem: the problem whose dimension is checked.
        diagonal: the engine's diagonal counterpart, suggested in the message.

    Raises:
        StageError: when ``problem.dimension > DENSE_DIMENSION_LIMIT``.
    """
    if problem.dimension > DENSE_DIMENSION_LIMIT:
        raise StageError(
            f"{engine}: the model has {problem.dimension:,} parameters, but dense methods "
            f"hold a d × d covariance and are limited to d ≤ {DENSE_DIMENSION_LIMIT:,}; "
            f"use `{diagonal}`, or infer a subset of the parameters with `parameters: [...]`"
        )


def dense_inverse(name: str, precision: Tensor) -> Tensor:
    """``precision⁻¹`` by Cholesky, symmetrised; an error that says what to do if not PD.

    Shared by the dense Laplace approximations and the dense extended Kalman filter.

    Raises:
        StageError: when ``precision`` is not positive definite.
    """
    precision = 0.5 * (precision + precision.T)
    factor, info = torch.linalg.cholesky_ex(precision)
    if int(info) != 0:
        raise StageError(
            f"{name}: the posterior precision is not positive definite (its leading minor "
            f"of order {int(info)} is not positive): the starting point is not a mode, or "
            "the data and the prior leave a direction unconstrained. Fit the `from` method "
            "longer, use a proper prior (`prior: {name: diag_normal}`), or use a GGN or "
            "Fisher curvature, which is positive semi-definite everywhere."
        )
    inverse = torch.cholesky_inverse(factor)
    return 0.5 * (inverse + inverse.T)


class Engine(NamedTuple):
    """The pure functions of one inference method.

    Attributes:
        init: ``(params (d,), generator) -> state``.
        update: ``(state, batch) -> (state, aux)``; ``aux`` is a dict of scalar tensors
            (for example ``loss``) that the fit stage may track.
        posterior: ``state -> Posterior``.
        passes: how many passes over the training data a fit makes (epochs).
        batch_size: minibatch size; ``None`` means full batch.
        streams: how many minibatch orders a fit draws per epoch: 1 (every chain sees
            the same batches), or K, one per chain, for an engine of K independent chains
            or members (``update`` then also receives :class:`ChainBatch` batches; a plain
            batch still means one batch that every chain shares).
    """

    init: Callable[[Tensor, torch.Generator], Any]
    update: Callable[[Any, Batch], tuple[Any, dict[str, Tensor]]]
    posterior: Callable[[Any], Posterior]
    passes: int
    batch_size: int | None
    streams: int = 1


class EngineBuilder(Protocol):
    """``build(problem, tempering, config) -> Engine``; config is the method's spec model."""

    def __call__(self, problem: Problem, tempering: Any, config: Any) -> Engine: ...
