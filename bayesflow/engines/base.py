"""What every engine shares: the problem it is given, its functions, its posterior.

Engines are pure. ``build(problem, tempering, config)`` binds hyper-parameters and returns
an :class:`Engine`, a NamedTuple of functions over an explicit state::

    state = engine.init(params, generator)
    state, aux = engine.update(state, batch)      # once per minibatch
    posterior = engine.posterior(state)

Engines never log, write files or read YAML; the fit stage drives them and tracks
what they return in ``aux``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "Batch",
    "Engine",
    "EngineBuilder",
    "Posterior",
    "Problem",
]

Batch = tuple[Tensor, Tensor]


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
    ``cov`` (d, d). A point estimate (MAP, MLE) is ``mean`` with ``var`` of zeros.
    """

    samples: Tensor | None = None
    mean: Tensor | None = None
    var: Tensor | None = None
    cov: Tensor | None = None

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
            (count, self.mean.shape[0]), generator=generator, dtype=self.mean.dtype
        ).to(self.mean.device)
        if self.cov is not None:
            factor = torch.linalg.cholesky(self.cov)
            return self.mean + noise @ factor.T
        assert self.var is not None
        return self.mean + noise * self.var.sqrt()

    def to_arrays(self, problem: Problem) -> dict[str, np.ndarray]:
        """The arrays of the ``posterior.npz`` contract (DESIGN.md)."""
        arrays: dict[str, np.ndarray] = {
            "param_names": np.array(problem.param_names),
            "param_shapes": np.array(["x".join(map(str, s)) or "scalar" for s in problem.param_shapes]),
        }
        for name in ("samples", "mean", "var", "cov"):
            value = getattr(self, name)
            if value is not None:
                arrays[name] = value.detach().cpu().numpy()
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Posterior:
        """Inverse of :meth:`to_arrays` (tensors on the CPU)."""
        values = {
            name: torch.as_tensor(arrays[name])
            for name in ("samples", "mean", "var", "cov")
            if name in arrays
        }
        return cls(**values)


class Engine(NamedTuple):
    """The pure functions of one inference method.

    Attributes:
        init: ``(params (d,), generator) -> state``.
        update: ``(state, batch) -> (state, aux)``; ``aux`` is a dict of scalar tensors
            (for example ``loss``) that the fit stage may track.
        posterior: ``state -> Posterior``.
        passes: how many passes over the training data a fit makes (epochs).
        batch_size: minibatch size; ``None`` means full batch.
    """

    init: Callable[[Tensor, torch.Generator], Any]
    update: Callable[[Any, Batch], tuple[Any, dict[str, Tensor]]]
    posterior: Callable[[Any], Posterior]
    passes: int
    batch_size: int | None


class EngineBuilder(Protocol):
    """``build(problem, tempering, config) -> Engine``; config is the method's spec model."""

    def __call__(self, problem: Problem, tempering: Any, config: Any) -> Engine: ...
