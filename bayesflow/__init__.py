"""bayesflow: declarative workflows for tempered Bayesian deep learning posteriors.

Not to be confused with the unrelated amortised-inference package ``bayesflow`` on
PyPI; this project's distribution is ``bayesflow-workflows``.
"""

from __future__ import annotations

from bayesflow.api import (
    Prepared,
    RunResult,
    artifacts,
    compare,
    evaluations,
    histories,
    load,
    plan,
    plan_table,
    posteriors,
    prepare,
    report,
    results,
    run,
    run_spec,
)
from bayesflow.errors import BayesflowError, SpecError, StageError
from bayesflow.posterior import load_posterior

__all__ = [
    "BayesflowError",
    "Prepared",
    "RunResult",
    "SpecError",
    "artifacts",
    "compare",
    "evaluations",
    "histories",
    "posteriors",
    "prepare",
    "report",
    "StageError",
    "load",
    "load_posterior",
    "plan",
    "plan_table",
    "results",
    "run",
    "run_spec",
]
__version__ = "0.1.0"
