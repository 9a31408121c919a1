"""Observation models p(y | x, θ) over the model's raw outputs.

Each likelihood gives the per-example log probability, the Hessian of its negative in the
outputs (the middle factor of the generalised Gauss-Newton matrix; for these exponential
families with canonical links it equals the Fisher information), the number of outputs
the model must produce, and the predictive distribution it implies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional

from bayesflow.families import register_likelihood
from bayesflow.registry import Registry

__all__ = ["LIKELIHOODS", "Likelihood", "build_likelihood"]


@dataclass(frozen=True)
class Likelihood:
    """One observation model.

    Attributes:
        name: registry name.
        task: ``"classification"``, ``"regression"``, or ``"energy"`` (the output is
            the log density; nothing to predict).
        noise_sd: observation noise of the gaussian likelihood.
    """

    name: str
    task: str
    noise_sd: float = 1.0

    def num_outputs(self, num_classes: int | None) -> int:
        """How many outputs the model needs."""
        if self.name == "categorical":
            assert num_classes is not None
            return num_classes
        return 1

    def log_prob(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Per-example log p(y | outputs), shape (n,)."""
        if self.name == "categorical":
            return -functional.cross_entropy(outputs, targets.long(), reduction="none")
        if self.name == "energy":
            return outputs.squeeze(-1)
        if self.name == "bernoulli":
            return -functional.binary_cross_entropy_with_logits(
                outputs.squeeze(-1), targets.to(outputs.dtype), reduction="none"
            )
        residual = (targets.to(outputs.dtype) - outputs.squeeze(-1)) / self.noise_sd
        return -0.5 * residual**2 - math.log(self.noise_sd) - 0.5 * math.log(2 * math.pi)

    def output_hessian(self, outputs: Tensor) -> Tensor:
        """Hessian of −log p(y | outputs) in the outputs, shape (n, k, k)."""
        if self.name == "categorical":
            probs = outputs.softmax(-1)
            return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)
        if self.name == "bernoulli":
            probs = outputs.sigmoid()
            return (probs * (1 - probs)).unsqueeze(-1)
        if self.name == "energy":  # log p is the output itself: linear, no curvature
            return torch.zeros_like(outputs).unsqueeze(-1)
        return torch.full_like(outputs, 1.0 / self.noise_sd**2).unsqueeze(-1)

    # What differs by likelihood beyond log p, asked by the methods and the evaluation
    # instead of the likelihood's name. The defaults are a likelihood with one datum per
    # target row; a likelihood of another unit (bayesflow.llm.likelihood.NextToken, a
    # datum per scored token) overrides them.
    dense_curvature = True
    """Whether a dense (d × d) curvature per datum is tractable (a dense Laplace)."""
    continual_curvature = "diag_ggn"
    """The diagonal curvature a continual update sums over an episode (bayesflow.continual)."""

    def data_points(self, targets: Tensor) -> int:
        """How many data points a target array holds: its rows."""
        return int(targets.shape[0])

    def diagonal_curvature(self, kind: str, problem: Any) -> Any:
        """The ``(problem, params, batch) -> (d,)`` diagonal curvature ``kind``
        (``diag_fisher``, ``diag_ggn``) over this likelihood's data points, or None when the
        per-example one of :mod:`bayesflow.engines.curvature` is right."""
        return None

    def kfac_layers(self, engine: str, kind: str, problem: Any) -> Any:
        """The layers a Kronecker-factored curvature of ``kind`` (``fisher``, ``ggn``) covers
        when they are not the network's own (:func:`bayesflow.engines.kfac.kfac_layers`);
        None for those."""
        return None

    def evaluation(self, problem: Any, samples: Any, inputs: Tensor, targets: Tensor, *, ece_bins: int,
                   ece_binning: str, outputs_of: Any) -> Any:
        """This likelihood's own predictive evaluation (the fields of
        :class:`bayesflow.evaluate.predictive.Evaluation`), or None for the per-example
        one of the task. ``samples`` is a function giving the parameter draws."""
        return None

    def probabilities(self, outputs: Tensor) -> Tensor:
        """Class probabilities (..., C) from outputs; bernoulli gives two columns."""
        if self.name == "categorical":
            return outputs.softmax(-1)
        if self.name == "bernoulli":
            positive = outputs.squeeze(-1).sigmoid()
            return torch.stack([1 - positive, positive], dim=-1)
        raise ValueError(f"a {self.name} likelihood has no class probabilities")


LIKELIHOODS: Registry[Any] = Registry("likelihood")


@LIKELIHOODS.register("categorical")
def categorical() -> Likelihood:
    """Softmax categorical over the outputs (logits)."""
    return Likelihood("categorical", "classification")


@LIKELIHOODS.register("bernoulli")
def bernoulli() -> Likelihood:
    """Bernoulli with the single output as logit."""
    return Likelihood("bernoulli", "classification")


@LIKELIHOODS.register("gaussian")
def gaussian(noise_sd: float = 1.0) -> Likelihood:
    """Gaussian with the output as mean and a fixed noise standard deviation."""
    return Likelihood("gaussian", "regression", noise_sd)


@LIKELIHOODS.register("energy")
def energy() -> Likelihood:
    """The model's output is the log density itself (for sampling a fixed target)."""
    return Likelihood("energy", "energy")


def build_likelihood(config: dict[str, Any]) -> Likelihood:
    """Build the likelihood a spec's ``likelihood`` section describes."""
    options = dict(config)
    name = options.pop("name")
    if name not in LIKELIHOODS:  # a family's own likelihood registers when its module loads
        register_likelihood(name)
    return LIKELIHOODS.get(name)(**options)
