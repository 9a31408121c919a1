"""bayesflow: declarative workflows for tempered Bayesian deep learning posteriors.

Not to be confused with the unrelated amortised-inference package ``bayesflow`` on
PyPI; this project's distribution is ``bayesflow-workflows``.
"""

from __future__ import annotations

from bayesflow.api import (
    RunResult,
    artifacts,
    compare,
    evaluations,
    histories,
    load,
    plan,
    plan_table,
    posteriors,
    report,
    results,
    run,
)
from bayesflow.errors import BayesflowError, SpecError, StageError
from bayesflow.posterior import load_posterior

__all__ = [
    "BayesflowError",
    "RunResult",
    "SpecError",
    "artifacts",
    "compare",
    "evaluations",
    "histories",
    "posteriors",
    "report",
    "StageError",
    "load",
    "load_posterior",
    "plan",
    "plan_table",
    "results",
    "run",
]
__version__ = "0.1.0"
