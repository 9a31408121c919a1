"""Predictive metrics of a fitted posterior on a test set.

``evaluate(problem, likelihood, posterior, x_test, y_test, n_samples, generator)`` draws
the posterior samples once and returns the summary metrics of DESIGN.md (``test_nll``,
``test_accuracy``, ``test_ece``, ``test_brier`` or, for regression, ``test_nll`` and
``test_rmse``). :data:`CONVENTIONS` says what each number means, for logging.
"""

from __future__ import annotations

from bayesflow.evaluate.metrics import (
    CONVENTIONS,
    accuracy,
    brier,
    ece,
    gaussian_nll,
    nll,
    rmse,
)
from bayesflow.evaluate.predictive import (
    evaluate,
    evaluate_classification,
    evaluate_regression,
    predictive_outputs,
    predictive_probabilities,
)

__all__ = [
    "CONVENTIONS",
    "accuracy",
    "brier",
    "ece",
    "evaluate",
    "evaluate_classification",
    "evaluate_regression",
    "gaussian_nll",
    "nll",
    "predictive_outputs",
    "predictive_probabilities",
    "rmse",
]
