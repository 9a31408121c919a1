"""The posterior predictive on a test set, and the summary metrics a fit run logs.

Parameter samples are pushed through the model with ``torch.func.vmap`` over the
sample axis, in chunks so that memory stays bounded by ``chunk × n × k`` outputs
whatever the number of samples. The classification predictive averages probabilities
over samples (see :mod:`bayesflow.evaluate.metrics`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Posterior, Problem
from bayesflow.evaluate import metrics
from bayesflow.likelihoods import Likelihood

__all__ = [
    "DEFAULT_CHUNK",
    "evaluate",
    "evaluate_classification",
    "evaluate_regression",
    "predictive_outputs",
    "predictive_probabilities",
]

# Samples evaluated per vmap call: 64 × 10,000 test points × 10 classes in float32 is
# 25 MB of outputs, small next to the activations of the models the workflows use.
DEFAULT_CHUNK = 64


def _chunks(samples: Tensor, chunk: int) -> list[Tensor]:
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples, got {chunk}")
    return list(samples.split(chunk, dim=0))


def predictive_outputs(
    problem: Problem, samples: Tensor, inputs: Tensor, chunk: int = DEFAULT_CHUNK
) -> Tensor:
    """Raw model outputs for every parameter sample.

    Args:
        problem: the flat-parameter problem whose ``forward`` is evaluated.
        samples: (S, d) parameter vectors.
        inputs: (n, ...) test inputs.
        chunk: how many samples one ``vmap`` call evaluates.

    Returns:
        (S, n, k) outputs (logits for classification, means for regression), on the
        problem's device, computed without gradients.
    """
    batched_forward = vmap(problem.forward, in_dims=(0, None))
    inputs = inputs.to(problem.device)
    with torch.no_grad():
        pieces = [
            batched_forward(piece.to(problem.device), inputs) for piece in _chunks(samples, chunk)
        ]
    return torch.cat(pieces, dim=0)


def predictive_probabilities(
    problem: Problem,
    likelihood: Likelihood,
    samples: Tensor,
    inputs: Tensor,
    chunk: int = DEFAULT_CHUNK,
) -> Tensor:
    """The classification predictive p̄(y|x) = (1/S) Σₛ p(y|x, θₛ).

    Probabilities (not logits) are averaged, one chunk at a time, so the (S, n, k)
    outputs are never held at once.

    Args:
        problem: the flat-parameter problem.
        likelihood: a classification likelihood (categorical or bernoulli).
        samples: (S, d) parameter vectors.
        inputs: (n, ...) test inputs.
        chunk: how many samples one ``vmap`` call evaluates.

    Returns:
        (n, C) predictive probabilities.
    """
    total: Tensor | None = None
    for piece in _chunks(samples, chunk):
        outputs = predictive_outputs(problem, piece, inputs, chunk=chunk)
        summed = likelihood.probabilities(outputs).sum(dim=0)
        total = summed if total is None else total + summed
    assert total is not None, "samples must hold at least one parameter vector"
    return total / samples.shape[0]


def evaluate_classification(
    problem: Problem,
    likelihood: Likelihood,
    samples: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    ece_bins: int = 10,
    chunk: int = DEFAULT_CHUNK,
) -> dict[str, float]:
    """Summary metrics of a classifier's posterior predictive.

    Returns:
        ``test_nll``, ``test_accuracy``, ``test_ece``, ``test_brier`` (conventions in
        :data:`bayesflow.evaluate.metrics.CONVENTIONS`).
    """
    probabilities = predictive_probabilities(problem, likelihood, samples, x_test, chunk)
    return {
        "test_nll": metrics.nll(probabilities, y_test),
        "test_accuracy": metrics.accuracy(probabilities, y_test),
        "test_ece": metrics.ece(probabilities, y_test, bins=ece_bins),
        "test_brier": metrics.brier(probabilities, y_test),
    }


def evaluate_regression(
    problem: Problem,
    likelihood: Likelihood,
    samples: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    chunk: int = DEFAULT_CHUNK,
) -> dict[str, float]:
    """Summary metrics of a regression posterior predictive (gaussian likelihood).

    Returns:
        ``test_nll`` (of the Gaussian predictive mixture) and ``test_rmse`` (of the
        predictive mean).
    """
    means = predictive_outputs(problem, samples, x_test, chunk).squeeze(-1)
    return {
        "test_nll": metrics.gaussian_nll(means, y_test, likelihood.noise_sd),
        "test_rmse": metrics.rmse(means, y_test),
    }


def _is_point_estimate(posterior: Posterior) -> bool:
    return (
        posterior.samples is None
        and posterior.cov is None
        and posterior.var is not None
        and not bool(posterior.var.any())
    )


def evaluate(
    problem: Problem,
    likelihood: Likelihood,
    posterior: Posterior,
    x_test: Tensor,
    y_test: Tensor,
    n_samples: int,
    generator: torch.Generator,
    ece_bins: int = 10,
) -> dict[str, float]:
    """Draw posterior samples once and compute the task's summary metrics.

    A point estimate (``mean`` with ``var`` of zeros) is evaluated with its one vector
    rather than ``n_samples`` identical copies.

    Args:
        problem: the flat-parameter problem.
        likelihood: decides the task (``likelihood.task``) and the predictive.
        posterior: the fitted posterior.
        x_test: (n, ...) test inputs.
        y_test: (n,) test targets.
        n_samples: parameter samples drawn for the predictive.
        generator: the random generator the draw uses.
        ece_bins: bins of the calibration error (classification only).

    Returns:
        A dict of metric name to float; see :data:`metrics.CONVENTIONS`.
    """
    if _is_point_estimate(posterior):
        assert posterior.mean is not None
        samples = posterior.mean.unsqueeze(0)
    else:
        samples = posterior.sample(n_samples, generator)
    if likelihood.task == "classification":
        return evaluate_classification(problem, likelihood, samples, x_test, y_test, ece_bins)
    if likelihood.task == "regression":
        return evaluate_regression(problem, likelihood, samples, x_test, y_test)
    raise ValueError(
        f"likelihood {likelihood.name!r} has task {likelihood.task!r}; expected "
        "'classification' or 'regression'"
    )
