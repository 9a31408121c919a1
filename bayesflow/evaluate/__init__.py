"""Predictive metrics, posterior quality and sampler diagnostics, as pure functions.

The modules, one responsibility each (docs/metrics.md defines every number):

- :mod:`~bayesflow.evaluate.metrics`: NLL, accuracy, ECE (equal-width or equal-mass
  bins), Brier, their single-sample versions; RMSE, Gaussian mixture NLL, interval
  coverage.
- :mod:`~bayesflow.evaluate.uncertainty`: TU/AU/EU decomposition, AUROC, OOD AUROC.
- :mod:`~bayesflow.evaluate.shift`: a named distribution-shift set's predictive metrics and
  its AUROCs against the test set (``shift_<metric>_<name>``).
- :mod:`~bayesflow.evaluate.predictive`: ``evaluate_full(problem, likelihood, posterior,
  x_test, y_test, n_samples, generator, ...)`` draws the posterior samples once
  (``sampled`` or ``linearized`` predictive) and returns an :class:`Evaluation`
  (``metrics``, per-point ``arrays``, ``conventions``); ``evaluate(...)`` returns just
  the metrics dict.
- :mod:`~bayesflow.evaluate.stein`: kernelised Stein discrepancy.
- :mod:`~bayesflow.evaluate.reference`: distance of mean and variances to a reference.
- :mod:`~bayesflow.evaluate.agreement`: agreement, total variation and W2 of a predictive
  against a reference predictive.
- :mod:`~bayesflow.evaluate.temperatures`: kinetic and configurational temperature.
- :mod:`~bayesflow.evaluate.convergence`: split R-hat and bulk ESS.
- :mod:`~bayesflow.evaluate.prior_predictive`: the prior predictive check.

:data:`CONVENTIONS` says what each logged number means, one line each.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each name is imported from its module when first used (PEP 562): reading a fit's flags
# (evaluate.flags, numbers only) must not import torch, which evaluate.predictive needs
# (~2 s of a no-op rerun of a small workflow, where nothing is evaluated).
_MODULES = {
    "BINNINGS": "bayesflow.evaluate.conventions",
    "CONVENTIONS": "bayesflow.evaluate.conventions",
    "ConfigurationalTemperature": "bayesflow.evaluate.temperatures",
    "DEFAULT_COVERAGE_LEVELS": "bayesflow.evaluate.metrics",
    "Evaluation": "bayesflow.evaluate.predictive",
    "KineticTemperature": "bayesflow.evaluate.temperatures",
    "PREDICTIONS": "bayesflow.evaluate.predictive",
    "PriorPredictive": "bayesflow.evaluate.prior_predictive",
    "PriorSampler": "bayesflow.evaluate.prior_predictive",
    "Uncertainty": "bayesflow.evaluate.uncertainty",
    "accuracy": "bayesflow.evaluate.metrics",
    "auroc": "bayesflow.evaluate.uncertainty",
    "brier": "bayesflow.evaluate.metrics",
    "chain_diagnostics": "bayesflow.evaluate.convergence",
    "classification_metrics": "bayesflow.evaluate.metrics",
    "compare_to_reference": "bayesflow.evaluate.reference",
    "configurational_temperature": "bayesflow.evaluate.temperatures",
    "decompose_uncertainty": "bayesflow.evaluate.uncertainty",
    "describe": "bayesflow.evaluate.conventions",
    "draw_samples": "bayesflow.evaluate.predictive",
    "ece": "bayesflow.evaluate.metrics",
    "effective_sample_size": "bayesflow.evaluate.convergence",
    "entropy": "bayesflow.evaluate.uncertainty",
    "evaluate": "bayesflow.evaluate.predictive",
    "evaluate_classification": "bayesflow.evaluate.predictive",
    "evaluate_full": "bayesflow.evaluate.predictive",
    "evaluate_regression": "bayesflow.evaluate.predictive",
    "gaussian_nll": "bayesflow.evaluate.metrics",
    "interval_coverage": "bayesflow.evaluate.metrics",
    "kernelized_stein_discrepancy": "bayesflow.evaluate.stein",
    "kinetic_temperature": "bayesflow.evaluate.temperatures",
    "median_bandwidth": "bayesflow.evaluate.stein",
    "nll": "bayesflow.evaluate.metrics",
    "ood_auroc": "bayesflow.evaluate.uncertainty",
    "posterior_moments": "bayesflow.evaluate.reference",
    "posterior_outputs": "bayesflow.evaluate.predictive",
    "predictive_cdf": "bayesflow.evaluate.metrics",
    "predictive_outputs": "bayesflow.evaluate.predictive",
    "predictive_probabilities": "bayesflow.evaluate.predictive",
    "prior_predictive": "bayesflow.evaluate.prior_predictive",
    "reference_distance": "bayesflow.evaluate.reference",
    "regression_metrics": "bayesflow.evaluate.metrics",
    "rmse": "bayesflow.evaluate.metrics",
    "sample_prior": "bayesflow.evaluate.prior_predictive",
    "sample_probabilities": "bayesflow.evaluate.predictive",
    "single_sample_metrics": "bayesflow.evaluate.metrics",
    "split_rhat": "bayesflow.evaluate.convergence",
    "stein_kernel_matrix": "bayesflow.evaluate.stein",
    "stein_scores": "bayesflow.evaluate.stein",
}


class _Package(types.ModuleType):
    """Keeps ``prior_predictive`` the function when its module of the same name is
    imported (importlib binds a submodule to its package's attribute), as it was when
    the package imported every name eagerly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _MODULES and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'bayesflow.evaluate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
