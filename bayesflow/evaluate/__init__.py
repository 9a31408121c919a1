"""Predictive metrics, posterior quality and sampler diagnostics, as pure functions.

The modules, one responsibility each (docs/metrics.md defines every number):

- :mod:`~bayesflow.evaluate.metrics`: NLL, accuracy, ECE (equal-width or equal-mass
  bins), Brier, their single-sample versions; RMSE, Gaussian mixture NLL, interval
  coverage.
- :mod:`~bayesflow.evaluate.uncertainty`: TU/AU/EU decomposition, AUROC, OOD AUROC.
- :mod:`~bayesflow.evaluate.predictive`: ``evaluate_full(problem, likelihood, posterior,
  x_test, y_test, n_samples, generator, ...)`` draws the posterior samples once
  (``sampled`` or ``linearized`` predictive) and returns an :class:`Evaluation`
  (``metrics``, per-point ``arrays``, ``conventions``); ``evaluate(...)`` returns just
  the metrics dict.
- :mod:`~bayesflow.evaluate.stein`: kernelised Stein discrepancy.
- :mod:`~bayesflow.evaluate.reference`: distance of mean and variances to a reference.
- :mod:`~bayesflow.evaluate.temperatures`: kinetic and configurational temperature.
- :mod:`~bayesflow.evaluate.convergence`: split R-hat and bulk ESS.
- :mod:`~bayesflow.evaluate.prior_predictive`: the prior predictive check.

:data:`CONVENTIONS` says what each logged number means, one line each.
"""

from __future__ import annotations

from bayesflow.evaluate.conventions import BINNINGS, CONVENTIONS, describe
from bayesflow.evaluate.convergence import chain_diagnostics, effective_sample_size, split_rhat
from bayesflow.evaluate.metrics import (
    DEFAULT_COVERAGE_LEVELS,
    accuracy,
    brier,
    classification_metrics,
    ece,
    gaussian_nll,
    interval_coverage,
    nll,
    predictive_cdf,
    regression_metrics,
    rmse,
    single_sample_metrics,
)
from bayesflow.evaluate.predictive import (
    PREDICTIONS,
    Evaluation,
    draw_samples,
    evaluate,
    evaluate_classification,
    evaluate_full,
    evaluate_regression,
    posterior_outputs,
    predictive_outputs,
    predictive_probabilities,
    sample_probabilities,
)
from bayesflow.evaluate.prior_predictive import (
    PriorPredictive,
    PriorSampler,
    prior_predictive,
    sample_prior,
)
from bayesflow.evaluate.reference import (
    compare_to_reference,
    posterior_moments,
    reference_distance,
)
from bayesflow.evaluate.stein import (
    kernelized_stein_discrepancy,
    median_bandwidth,
    stein_kernel_matrix,
    stein_scores,
)
from bayesflow.evaluate.temperatures import (
    ConfigurationalTemperature,
    KineticTemperature,
    configurational_temperature,
    kinetic_temperature,
)
from bayesflow.evaluate.uncertainty import (
    Uncertainty,
    auroc,
    decompose_uncertainty,
    entropy,
    ood_auroc,
)

__all__ = [
    "BINNINGS",
    "CONVENTIONS",
    "DEFAULT_COVERAGE_LEVELS",
    "PREDICTIONS",
    "ConfigurationalTemperature",
    "Evaluation",
    "KineticTemperature",
    "PriorPredictive",
    "PriorSampler",
    "Uncertainty",
    "accuracy",
    "auroc",
    "brier",
    "chain_diagnostics",
    "classification_metrics",
    "compare_to_reference",
    "configurational_temperature",
    "decompose_uncertainty",
    "describe",
    "draw_samples",
    "ece",
    "effective_sample_size",
    "entropy",
    "evaluate",
    "evaluate_classification",
    "evaluate_full",
    "evaluate_regression",
    "gaussian_nll",
    "interval_coverage",
    "kernelized_stein_discrepancy",
    "kinetic_temperature",
    "median_bandwidth",
    "nll",
    "ood_auroc",
    "posterior_moments",
    "posterior_outputs",
    "predictive_cdf",
    "predictive_outputs",
    "predictive_probabilities",
    "prior_predictive",
    "reference_distance",
    "regression_metrics",
    "rmse",
    "sample_prior",
    "sample_probabilities",
    "single_sample_metrics",
    "split_rhat",
    "stein_kernel_matrix",
    "stein_scores",
]
