"""A fitted posterior as a product: load it back after a study and use it.

    import bayesflow
    posterior = bayesflow.load_posterior("<fit run id>")    # or a local folder
    params = posterior.sample(100, seed=0)                 # (100, d) flat parameters
    probabilities = posterior.predict(x_test)              # (n, C), averaged over samples
    network = posterior.module()                           # an nn.Module at the mean

=================  ===========================================================================
``files``          the three files a fit is rebuilt from, the cell, :class:`PosteriorError`
``fitted``         :class:`FittedPosterior`: ``sample``, ``predict``, ``log_prob``, ``module``
``load``           :func:`load_posterior` from a fit run id or a local folder
``texts``          :func:`score_texts`: texts under a language model's posterior predictive
``continuations``  continuations scored member by member (lm-eval's ``loglikelihood``)
``harness``        :class:`PosteriorLM`: the posterior as an lm-eval model (``lmeval`` extra)
``harness_tasks``  :func:`evaluate_tasks`: lm-eval tasks plus bayesflow's calibration
=================  ===========================================================================

``PosteriorLM`` and ``evaluate_tasks`` are imported on first use
(``from bayesflow.posterior import PosteriorLM``), so lm-eval loads only when asked for.

The MLflow pyfunc model of a fit (:mod:`bayesflow.tracking.pyfunc`) carries the same
three files, so a downloaded ``model`` folder is a ``load_posterior`` source too.
"""

from __future__ import annotations

from bayesflow.posterior.files import (
    CELL_FILE,
    CELL_KEYS,
    MODEL_PATH,
    POSTERIOR_FILE,
    SIZE_KEYS,
    SPEC_FILE,
    PosteriorError,
    cell_of,
    cell_sizes,
    dataset_sizes,
    read_spec,
)
from bayesflow.posterior.fitted import (
    EVALUATION_SEED_OFFSET,
    FittedPosterior,
    NoDensityError,
    RegressionPrediction,
)
from bayesflow.posterior.load import load_posterior
from bayesflow.posterior.texts import score_texts

# Imported on first use: they import lm-eval (the `lmeval` extra).
_LAZY = {"PosteriorLM": "bayesflow.posterior.harness", "evaluate_tasks": "bayesflow.posterior.harness_tasks"}

__all__ = [
    "CELL_FILE",
    "CELL_KEYS",
    "EVALUATION_SEED_OFFSET",
    "MODEL_PATH",
    "POSTERIOR_FILE",
    "SIZE_KEYS",
    "SPEC_FILE",
    "FittedPosterior",
    "NoDensityError",
    "PosteriorError",
    "PosteriorLM",
    "RegressionPrediction",
    "cell_of",
    "cell_sizes",
    "dataset_sizes",
    "evaluate_tasks",
    "load_posterior",
    "read_spec",
    "score_texts",
]


def __getattr__(name: str) -> object:
    """``PosteriorLM`` and ``evaluate_tasks``, imported when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bayesflow.posterior' has no attribute {name!r}")
