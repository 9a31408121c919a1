"""Metrics of the linearised (GLM) predictive from its moments, without parameter samples.

:mod:`bayesflow.engines.linearized` gives, per test point, the law N(f_mean, f_var) of the
linearised network's outputs. From it:

- ``linearized_mc``: :func:`linearized_outputs_of` draws outputs from that law, and the
  evaluation proceeds as for any (S, n, k) outputs (every metric, the decomposition);
- ``closed_form``: :func:`closed_form_scores` gives the metrics of a closed-form
  predictive. Classification: the probit probabilities, hence ``test_nll``,
  ``test_accuracy``, ``test_ece``, ``test_brier`` and the total uncertainty
  TU = H[p̄(y|x)]; there are no per-sample probabilities, so no ``_single`` metrics and no
  aleatoric/epistemic split (nor ``ood_auroc_epistemic``). Regression (a Gaussian
  likelihood): the exact predictive N(f_mean, f_var + σ²), hence ``test_nll``,
  ``test_rmse``, the interval coverages, the PIT values and ``epistemic_variance`` = f_var
  (no ``_single`` metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy.special import ndtr
from torch import Tensor

from bayesflow.engines.base import Posterior, Problem, linearized_outputs
from bayesflow.engines.linearized import (
    functional_moments,
    probit_probabilities,
    sample_outputs,
)
from bayesflow.evaluate import metrics
from bayesflow.evaluate.conventions import describe
from bayesflow.evaluate.uncertainty import entropy, ood_auroc

__all__ = ["CLOSED_FORM_CONVENTIONS", "closed_form_scores", "linearized_outputs_of"]

CLOSED_FORM_CONVENTIONS = {
    "classification": (
        "closed form: probit approximation of the linearised predictive, softmax(f / sqrt(1 "
        "+ pi/8 diag(J Sigma J^T))) (one logit: sigmoid); no per-sample probabilities, so no "
        "_single metrics and no aleatoric/epistemic split"
    ),
    "regression": "closed form: the exact linearised predictive N(f, J Sigma J^T + noise_sd^2)",
}
"""The ``predictive`` convention of the ``closed_form`` predictive, per task."""


def linearized_outputs_of(
    problem: Problem,
    posterior: Posterior,
    inputs: Tensor,
    n_samples: int,
    generator: torch.Generator,
    prediction: str,
    chunk: int,
) -> Tensor:
    """(S, n, k) outputs of the linearised network: parameter samples pushed through it
    (``linearized``) or outputs drawn from its law N(f_mean, f_var) (``linearized_mc``)."""
    if prediction == "linearized_mc":
        moments = functional_moments(problem, posterior, inputs)
        return sample_outputs(moments, n_samples, generator)
    return linearized_outputs(problem, posterior, inputs, n_samples, generator, chunk)


def closed_form_scores(
    problem: Problem,
    likelihood: Any,
    posterior: Posterior,
    x_test: Tensor,
    y_test: Tensor,
    *,
    ece_bins: int,
    ece_binning: str,
    coverage_levels: Sequence[float],
    x_ood: Tensor | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, str]]:
    """The metrics, per-point arrays and conventions of the ``closed_form`` predictive.

    The moments of the test and OOD points come from one chunked pass
    (:func:`~bayesflow.engines.linearized.functional_moments`).

    Returns:
        ``(metrics, arrays, conventions)`` as
        :class:`~bayesflow.evaluate.predictive.Evaluation` holds them (see the module
        docstring for which ones).
    """
    inputs = x_test if x_ood is None else torch.cat([x_test, x_ood.to(x_test)])
    moments = functional_moments(problem, posterior, inputs)
    count = x_test.shape[0]
    if likelihood.task == "classification":
        probabilities = probit_probabilities(moments, likelihood).cpu().numpy()
        scores, arrays = _probit_scores(probabilities, y_test, ece_bins, ece_binning, count)
    else:
        mean = moments.mean.detach().double().cpu().squeeze(-1).numpy()
        epistemic = moments.variance.detach().double().cpu()[:, 0, 0].numpy()
        scores, arrays = _gaussian_scores(
            mean, epistemic, y_test, likelihood.noise_sd, coverage_levels, count
        )
    conventions = {**describe(scores, ece_bins, ece_binning), "predictive": CLOSED_FORM_CONVENTIONS[likelihood.task]}
    return scores, arrays, conventions


def _probit_scores(
    probabilities: np.ndarray, y_test: Tensor, ece_bins: int, ece_binning: str, count: int
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Metrics of the probit predictive at the first ``count`` points (the rest are OOD)."""
    arrays = {
        "probabilities": probabilities[:count],
        "uncertainty_total": entropy(probabilities[:count]),
        "labels": y_test.detach().cpu().numpy(),
    }
    scores = metrics.classification_metrics(probabilities[:count], y_test, ece_bins, ece_binning)
    if probabilities.shape[0] > count:
        arrays["ood_probabilities"] = probabilities[count:]
        arrays["ood_uncertainty_total"] = entropy(probabilities[count:])
        scores["ood_auroc_total"] = ood_auroc(
            arrays["uncertainty_total"], arrays["ood_uncertainty_total"]
        )
    return scores, arrays


def _gaussian_scores(
    mean: np.ndarray,
    epistemic: np.ndarray,
    y_test: Tensor,
    noise_sd: float,
    levels: Sequence[float],
    count: int,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Metrics of the Gaussian predictive N(mean, epistemic + σ²) at the first ``count``
    points (the rest are OOD points)."""
    targets = y_test.detach().double().cpu().numpy()
    variance = epistemic[:count] + noise_sd**2
    residual = targets - mean[:count]
    log_density = -0.5 * residual**2 / variance - 0.5 * np.log(2 * np.pi * variance)
    cdf = np.asarray(ndtr(residual / np.sqrt(variance)))
    distance = np.abs(cdf - 0.5)
    scores = {
        "test_nll": float(-log_density.mean()),
        "test_rmse": float(np.sqrt((residual**2).mean())),
    }
    if any(not 0.0 < level < 1.0 for level in levels):
        raise ValueError(f"coverage levels must lie in (0, 1), got {list(levels)}")
    scores.update({metrics.coverage_name(level): float((distance <= level / 2).mean()) for level in levels})
    arrays = {
        "predictive_mean": mean[:count],
        "epistemic_variance": epistemic[:count],
        "predictive_cdf": cdf,
        "targets": targets,
    }
    if mean.shape[0] > count:
        arrays["ood_epistemic_variance"] = epistemic[count:]
        scores["ood_auroc_epistemic"] = ood_auroc(arrays["epistemic_variance"], epistemic[count:])
    return scores, arrays
