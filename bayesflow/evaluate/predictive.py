"""The posterior predictive on a test set, and everything an evaluate stage records.

:func:`evaluate_full` draws the posterior samples once, pushes the test inputs and any
OOD inputs through them in one call (:func:`posterior_outputs`, see :data:`PREDICTIONS`),
and computes every predictive metric, the per-point uncertainty decomposition and the
OOD AUROCs from those outputs (``closed_form``: without samples;
:mod:`bayesflow.evaluate.linearized`). It returns an :class:`Evaluation` whose ``metrics``
a run logs and whose ``arrays`` a stage saves as one ``.npz``; :func:`evaluate` returns
only the metrics. :func:`evaluate_classification` and :func:`evaluate_regression` are the
pure part, on the (S, n, k) outputs; a language model's is :mod:`bayesflow.evaluate.tokens`.

Samples go through the model vmapped, ``chunk`` at a time. The per-sample probabilities
(S, n, C) are kept for the single-sample metrics and the decomposition (50 × 10,000 × 10
is 40 MB in float64); the predictive averages probabilities over samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Posterior, Problem
from bayesflow.evaluate import metrics
from bayesflow.evaluate.conventions import describe
from bayesflow.evaluate.linearized import closed_form_scores, linearized_outputs_of
from bayesflow.evaluate.shift import shift_evaluation
from bayesflow.evaluate.uncertainty import decompose_uncertainty, ood_auroc
from bayesflow.likelihoods import Likelihood
from bayesflow.spec.prediction import CLOSED_FORM, PREDICTIONS, current_name

__all__ = [
    "DEFAULT_CHUNK",
    "PREDICTIONS",
    "Evaluation",
    "draw_samples",
    "evaluate",
    "evaluate_classification",
    "evaluate_full",
    "evaluate_regression",
    "posterior_outputs",
    "predictive_outputs",
    "predictive_probabilities",
    "sample_probabilities",
]

# Samples evaluated per vmap call: 64 × 10,000 test points × 10 classes in float32 is
# 25 MB of outputs, small next to the activations of the models the workflows use.
DEFAULT_CHUNK = 64



def _chunks(samples: Tensor, chunk: int) -> list[Tensor]:
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples, got {chunk}")
    return list(samples.split(chunk, dim=0))


# Inputs per forward call: the activations of a chunk of samples over all 25,000 IMDB test
# reviews would need about 95 GB for the CNN-LSTM; 2,048 rows keep it to a few GB.
INPUT_CHUNK = 2048


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
    batched_forward = vmap(problem.forward, in_dims=(0, None), randomness="different")  # MC dropout's masks
    inputs = inputs.to(problem.device)
    with torch.no_grad():
        pieces = [
            torch.cat([
                batched_forward(piece.to(problem.device), rows)
                for rows in inputs.split(INPUT_CHUNK)
            ], dim=1)
            for piece in _chunks(samples, chunk)
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


def sample_probabilities(
    problem: Problem,
    likelihood: Likelihood,
    samples: Tensor,
    inputs: Tensor,
    chunk: int = DEFAULT_CHUNK,
) -> Tensor:
    """Class probabilities p(y|x, θₛ) of every parameter sample.

    Args:
        problem: the flat-parameter problem.
        likelihood: a classification likelihood (categorical or bernoulli).
        samples: (S, d) parameter vectors.
        inputs: (n, ...) inputs.
        chunk: how many samples one ``vmap`` call evaluates.

    Returns:
        (S, n, C) probabilities on the CPU (bernoulli gives C = 2).
    """
    pieces = [
        likelihood.probabilities(predictive_outputs(problem, piece, inputs, chunk)).cpu()
        for piece in _chunks(samples, chunk)
    ]
    return torch.cat(pieces, dim=0)


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation of a posterior on a test set produced.

    Attributes:
        metrics: scalar metrics by the names runs log (``test_nll``, ``test_nll_single``,
            ``ood_auroc_epistemic``, …).
        arrays: per-point arrays for an ``.npz`` artifact: classification gives
            ``probabilities`` (n, C), ``labels`` and ``uncertainty_total``,
            ``uncertainty_aleatoric``, ``uncertainty_epistemic`` (n,), plus the same with
            an ``ood_`` prefix (no labels) when OOD outputs were given, and with a
            ``shift_<name>_`` prefix (with labels) for each shift set; regression gives
            ``predictive_mean``, ``epistemic_variance``, ``predictive_cdf``, ``targets``
            and ``ood_epistemic_variance``.
        conventions: the convention line of each metric, with the settings used.
    """

    metrics: dict[str, float]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    conventions: dict[str, str] = field(default_factory=dict)


def _uncertainty_arrays(sample_probs: Tensor, prefix: str) -> dict[str, np.ndarray]:
    decomposition = decompose_uncertainty(sample_probs)
    return {
        f"{prefix}probabilities": sample_probs.double().mean(dim=0).numpy(),
        f"{prefix}uncertainty_total": decomposition.total,
        f"{prefix}uncertainty_aleatoric": decomposition.aleatoric,
        f"{prefix}uncertainty_epistemic": decomposition.epistemic,
    }


def evaluate_classification(
    outputs: Tensor,
    likelihood: Likelihood,
    y_test: Tensor,
    *,
    ece_bins: int = 10,
    ece_binning: str = "equal_width",
    ood_outputs: Tensor | None = None,
    shift_outputs: Sequence[tuple[str, Tensor, Tensor]] = (),
) -> Evaluation:
    """Metrics, uncertainty decomposition and OOD AUROCs of a classifier's sampled outputs.

    Args:
        outputs: (S, n, k) logits of S parameter samples on the test inputs.
        likelihood: the classification likelihood that turns logits into probabilities.
        y_test: (n,) labels.
        ece_bins, ece_binning: the ECE's bins (see :func:`metrics.ece`).
        ood_outputs: (S, m, k) logits of the same samples on OOD inputs; adds
            ``ood_auroc_total`` and ``ood_auroc_epistemic``.
        shift_outputs: ``(name, (S, m, k) logits, (m,) labels)`` of named shift sets under
            the same samples; adds ``shift_<metric>_<name>`` (:mod:`bayesflow.evaluate.shift`).

    Returns:
        An :class:`Evaluation` with ``test_nll``, ``test_accuracy``, ``test_ece``,
        ``test_brier`` and their ``_single`` versions.
    """
    sample_probs = likelihood.probabilities(outputs).detach().cpu()
    arrays = _uncertainty_arrays(sample_probs, "")
    arrays["labels"] = y_test.detach().cpu().numpy()
    scores = metrics.classification_metrics(arrays["probabilities"], y_test, ece_bins, ece_binning)
    scores.update(metrics.single_sample_metrics(sample_probs, y_test, ece_bins, ece_binning))
    if ood_outputs is not None:
        ood_probs = likelihood.probabilities(ood_outputs).detach().cpu()
        arrays.update(_uncertainty_arrays(ood_probs, "ood_"))
        for kind in ("total", "epistemic"):
            scores[f"ood_auroc_{kind}"] = ood_auroc(
                arrays[f"uncertainty_{kind}"], arrays[f"ood_uncertainty_{kind}"]
            )
    conventions = describe(scores, ece_bins, ece_binning)
    for name, outputs_of_set, labels in shift_outputs:
        shifted = shift_evaluation(sample_probs, likelihood.probabilities(outputs_of_set).detach().cpu(),
                                   labels.detach().cpu(), name, ece_bins, ece_binning)
        scores.update(shifted[0])
        arrays.update(shifted[1])
        conventions.update(shifted[2])
    return Evaluation(scores, arrays, conventions)


def evaluate_regression(
    outputs: Tensor,
    likelihood: Likelihood,
    y_test: Tensor,
    *,
    coverage_levels: Sequence[float] = metrics.DEFAULT_COVERAGE_LEVELS,
    ood_outputs: Tensor | None = None,
) -> Evaluation:
    """Metrics of a regression posterior predictive (gaussian likelihood).

    Args:
        outputs: (S, n, 1) or (S, n) predicted means of S parameter samples.
        likelihood: the gaussian likelihood (its ``noise_sd`` is σ).
        y_test: (n,) targets.
        coverage_levels: levels of the central predictive intervals.
        ood_outputs: means of the same samples on OOD inputs; adds
            ``ood_auroc_epistemic`` (the epistemic variance as score; the total variance
            adds a constant σ², so its AUROC is the same).

    Returns:
        An :class:`Evaluation` with ``test_nll`` (of the Gaussian predictive mixture),
        ``test_rmse`` (of the predictive mean), their ``_single`` versions and
        ``test_coverage_<level>``.
    """
    means = _means(outputs)
    scores = metrics.regression_metrics(means, y_test, likelihood.noise_sd, coverage_levels)
    arrays = {
        "predictive_mean": means.mean(dim=0).numpy(),
        "epistemic_variance": means.var(dim=0, unbiased=False).numpy(),
        "predictive_cdf": metrics.predictive_cdf(means, y_test, likelihood.noise_sd),
        "targets": y_test.detach().cpu().numpy(),
    }
    if ood_outputs is not None:
        arrays["ood_epistemic_variance"] = _means(ood_outputs).var(dim=0, unbiased=False).numpy()
        scores["ood_auroc_epistemic"] = ood_auroc(
            arrays["epistemic_variance"], arrays["ood_epistemic_variance"]
        )
    return Evaluation(scores, arrays, describe(scores))


def _means(outputs: Tensor) -> Tensor:
    """(S, n, 1) or (S, n) outputs as (S, n) float64 on the CPU."""
    values = outputs.detach().double().cpu()
    return values.squeeze(-1) if values.ndim == 3 else values


def _is_point_estimate(posterior: Posterior) -> bool:
    return (
        posterior.samples is None
        and posterior.cov is None
        and posterior.var is not None
        and not bool(posterior.var.any())
    )


def draw_samples(posterior: Posterior, n_samples: int, generator: torch.Generator) -> Tensor:
    """The parameter samples an evaluation uses, (S, d).

    A point estimate (``mean`` with ``var`` of zeros) gives its one vector rather than
    ``n_samples`` identical copies; a sample set is subsampled evenly.
    """
    if _is_point_estimate(posterior):
        assert posterior.mean is not None
        return posterior.mean.unsqueeze(0)
    return posterior.sample(n_samples, generator)


def posterior_outputs(
    problem: Problem,
    posterior: Posterior,
    inputs: Tensor,
    n_samples: int,
    generator: torch.Generator,
    prediction: str = "sampled",
    chunk: int = DEFAULT_CHUNK,
) -> Tensor:
    """(S, n, k) outputs of one draw of posterior samples on ``inputs``.

    Args:
        problem: the flat-parameter problem.
        posterior: the fitted posterior.
        inputs: (n, ...) inputs; concatenate test and OOD inputs to share the draw.
        n_samples: S (a point estimate uses its one vector, see :func:`draw_samples`).
        generator: the random generator the draw uses.
        prediction: ``"sampled"`` (through the network), else through the network
            linearised at the mean (Gaussians only; ``closed_form`` samples as ``_mc``).
        chunk: how many samples one ``vmap`` call evaluates.
    """
    prediction = current_name(prediction)  # linearized_probit reads as closed_form
    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction must be one of {list(PREDICTIONS)}, got {prediction!r}")
    if prediction != "sampled" and not _is_point_estimate(posterior):
        return linearized_outputs_of(problem, posterior, inputs, n_samples, generator, prediction, chunk)
    samples = draw_samples(posterior, n_samples, generator)
    return predictive_outputs(problem, samples, inputs, chunk)


def evaluate_full(
    problem: Problem,
    likelihood: Likelihood,
    posterior: Posterior,
    x_test: Tensor,
    y_test: Tensor,
    n_samples: int,
    generator: torch.Generator,
    ece_bins: int = 10,
    *,
    ece_binning: str = "equal_width",
    coverage_levels: Sequence[float] = metrics.DEFAULT_COVERAGE_LEVELS,
    x_ood: Tensor | None = None,
    prediction: str = "sampled",
    chunk: int = DEFAULT_CHUNK,
    shifts: Sequence[tuple[str, Tensor, Tensor]] = (),
) -> Evaluation:
    """Draw posterior samples once; compute every metric and per-point array from them.

    Args:
        problem: the flat-parameter problem.
        likelihood: decides the task (``likelihood.task``) and the predictive.
        posterior: the fitted posterior.
        x_test, y_test: (n, ...) test inputs, (n,) targets (a ``next_token`` likelihood:
            (n, L) windows, (n, S) scored tokens, :mod:`bayesflow.evaluate.tokens`).
        n_samples: parameter samples drawn for the predictive.
        generator: the random generator the draw uses.
        ece_bins, ece_binning: the ECE's bins (classification only).
        coverage_levels: central predictive interval levels (regression only).
        x_ood: optional OOD inputs for the OOD AUROCs, through the samples of ``x_test``.
        prediction: one of :data:`PREDICTIONS` (``closed_form``: without samples).
        chunk: how many samples one ``vmap`` call evaluates.
        shifts: ``(name, inputs, labels)`` of named distribution-shift sets
            (classification), through the samples of ``x_test``.

    Returns:
        An :class:`Evaluation`; see :data:`bayesflow.evaluate.CONVENTIONS`.

    Raises:
        ValueError: shift sets for a likelihood that is not a classifier's, or with the
            ``closed_form`` predictive (no per-sample probabilities to decompose).
    """
    own = likelihood.evaluation(  # a likelihood of its own data points (a language model's tokens)
        problem, lambda: draw_samples(posterior, n_samples, generator), x_test, y_test, ece_bins=ece_bins,
        ece_binning=ece_binning, outputs_of=lambda s, x: predictive_outputs(problem, s, x, chunk))
    if own is not None:
        return Evaluation(*own)
    if likelihood.task not in ("classification", "regression"):
        raise ValueError(f"likelihood {likelihood.name!r} has task {likelihood.task!r}; "
                         "expected 'classification' or 'regression'")
    if shifts and (likelihood.task != "classification" or (
            current_name(prediction) == CLOSED_FORM and not _is_point_estimate(posterior))):
        raise ValueError(f"shift sets need a classifier's sampled predictive, got task {likelihood.task!r} "
                         f"and prediction {prediction!r}; use prediction: sampled or linearized")
    if current_name(prediction) == CLOSED_FORM and not _is_point_estimate(posterior):
        return Evaluation(*closed_form_scores(
            problem, likelihood, posterior, x_test, y_test, ece_bins=ece_bins,
            ece_binning=ece_binning, coverage_levels=coverage_levels, x_ood=x_ood))
    parts = [x_test] + ([] if x_ood is None else [x_ood.to(x_test)]) + [x.to(x_test) for _, x, _ in shifts]
    outputs = posterior_outputs(problem, posterior, parts[0] if len(parts) == 1 else torch.cat(parts), n_samples, generator, prediction, chunk)
    pieces = list(outputs.split([part.shape[0] for part in parts], dim=1))
    test_outputs, ood_outputs = pieces.pop(0), (None if x_ood is None else pieces.pop(0))
    if likelihood.task == "classification":
        return evaluate_classification(
            test_outputs, likelihood, y_test, ece_bins=ece_bins, ece_binning=ece_binning,
            ood_outputs=ood_outputs,
            shift_outputs=[(name, piece, y) for (name, _, y), piece in zip(shifts, pieces)],
        )
    return evaluate_regression(test_outputs, likelihood, y_test, coverage_levels=coverage_levels,
                               ood_outputs=ood_outputs)


def evaluate(
    problem: Problem,
    likelihood: Likelihood,
    posterior: Posterior,
    x_test: Tensor,
    y_test: Tensor,
    n_samples: int,
    generator: torch.Generator,
    ece_bins: int = 10,
    *,
    ece_binning: str = "equal_width",
    coverage_levels: Sequence[float] = metrics.DEFAULT_COVERAGE_LEVELS,
    x_ood: Tensor | None = None,
    prediction: str = "sampled",
    chunk: int = DEFAULT_CHUNK,
) -> dict[str, float]:
    """The ``metrics`` of :func:`evaluate_full` (same arguments), for callers that log them."""
    return evaluate_full(
        problem, likelihood, posterior, x_test, y_test, n_samples, generator, ece_bins, ece_binning=ece_binning,
        coverage_levels=coverage_levels, x_ood=x_ood, prediction=prediction, chunk=chunk,
    ).metrics
