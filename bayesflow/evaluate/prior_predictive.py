"""Prior predictive check of a classifier (Wenzel et al. 2020, Section 5).

Draw parameters from the prior, push the test inputs through each draw, and look at
the class probabilities it induces. Wenzel et al. found that a N(0, I) prior on a
ResNet makes most draws send *every* input to one class with high confidence; a
sensible prior spreads the inputs over the classes. Two summaries per draw:

- ``majority_fraction``: the fraction of inputs whose argmax class is the draw's most
  frequent class (1 = every input in one class; 1/C = evenly spread);
- ``max_probability``: the mean over inputs of max_c p(c|x, θ) (1 = certain; 1/C =
  uniform).

Read them together: a tiny prior variance makes every logit nearly equal to the output
bias, so its draws also put (almost) every input in one class, but with probabilities
near 1/C; only a large ``max_probability`` with a large ``majority_fraction`` is the
pathology Wenzel et al. describe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from bayesflow.engines.base import Problem
from bayesflow.evaluate.predictive import DEFAULT_CHUNK, sample_probabilities
from bayesflow.likelihoods import Likelihood

__all__ = ["PriorPredictive", "PriorSampler", "prior_predictive", "sample_prior"]


class PriorSampler(Protocol):
    """``(problem, count, generator) -> params (count, d)`` drawn from the prior."""

    def __call__(self, problem: Problem, count: int, generator: torch.Generator) -> Tensor: ...


def sample_prior(problem: Problem, count: int, generator: torch.Generator) -> Tensor:
    """Draws from the diagonal normal prior N(0, diag(1 / ``problem.prior_precision``)).

    Raises:
        ValueError: when some parameter has no prior (precision 0, as under ``none``).
    """
    precision = problem.prior_precision.detach().double()
    if not bool((precision > 0).all()):
        raise ValueError(
            f"{int((precision <= 0).sum())} of {precision.numel()} parameters have prior "
            "precision 0 (a flat prior) and cannot be drawn; use a proper prior such as "
            "diag_normal, or pass your own sampler"
        )
    # A generator draws only on its own device (a CUDA generator cannot fill a CPU tensor):
    # draw there, then move the draws to the problem's device.
    noise = torch.randn(
        (count, problem.dimension), generator=generator, dtype=torch.float64, device=generator.device
    ).to(precision.device)
    return (noise / precision.sqrt()).to(problem.prior_precision.dtype)


@dataclass(frozen=True)
class PriorPredictive:
    """Class probabilities of prior draws and their summaries.

    Attributes:
        probabilities: (draws, n, C) p(c|x, θ) of each prior draw.
        class_fractions: (draws, C) fraction of inputs each draw assigns (argmax) to
            each class.
        majority_fraction: (draws,) the largest of each draw's class fractions.
        max_probability: (draws,) mean over inputs of max_c p(c|x, θ).
    """

    probabilities: np.ndarray
    class_fractions: np.ndarray
    majority_fraction: np.ndarray
    max_probability: np.ndarray

    def metrics(self) -> dict[str, float]:
        """``prior_majority_fraction`` and ``prior_max_probability``, means over draws."""
        return {
            "prior_majority_fraction": float(self.majority_fraction.mean()),
            "prior_max_probability": float(self.max_probability.mean()),
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array, for an ``.npz`` artifact."""
        return {
            "probabilities": self.probabilities,
            "class_fractions": self.class_fractions,
            "majority_fraction": self.majority_fraction,
            "max_probability": self.max_probability,
        }


def prior_predictive(
    problem: Problem,
    likelihood: Likelihood,
    inputs: Tensor,
    draws: int,
    generator: torch.Generator,
    sampler: PriorSampler = sample_prior,
    chunk: int = DEFAULT_CHUNK,
) -> PriorPredictive:
    """Class probabilities that ``draws`` prior draws assign to ``inputs``, summarised.

    Args:
        problem: the flat-parameter problem (its prior precision feeds the default sampler).
        likelihood: a classification likelihood.
        inputs: (n, ...) inputs, typically the test inputs.
        draws: how many prior draws.
        generator: the random generator of the draws.
        sampler: draws parameters from the prior; :func:`sample_prior` by default.
        chunk: how many draws one ``vmap`` call evaluates.
    """
    params = sampler(problem, draws, generator)
    probabilities = sample_probabilities(problem, likelihood, params, inputs, chunk).double().cpu()
    classes = probabilities.shape[-1]
    assigned = torch.nn.functional.one_hot(probabilities.argmax(-1), classes).double()
    class_fractions = assigned.mean(dim=1).numpy()
    return PriorPredictive(
        probabilities=probabilities.numpy(),
        class_fractions=class_fractions,
        majority_fraction=class_fractions.max(axis=1),
        max_probability=probabilities.max(dim=-1).values.mean(dim=1).numpy(),
    )
