"""The prior predictive check (Wenzel et al., 2020, Section 5): the class probabilities
that networks drawn from the prior give the test inputs, saved as ``prior_predictive.npz``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.errors import StageError
from bayesflow.stages.artefacts import PRIOR_PREDICTIVE_FILE, PriorPredictiveArtefact
from bayesflow.stages.context import WorkflowContext

__all__ = ["prior_predictive"]

# Offset of the check's generator seed from the spec's first seed, so that its draws are
# not the fits' initialisations.
SEED_OFFSET = 20_000


def prior_predictive(context: WorkflowContext, stage: Stage, staging: Path) -> PriorPredictiveArtefact:
    """Draw ``evaluate.prior_draws`` networks from the prior and summarise their predictions."""
    import torch

    from bayesflow.evaluate.prior_predictive import prior_predictive as check_prior

    problem, likelihood, _ = context.problem(stage)
    if likelihood.task != "classification":
        raise StageError("evaluate.prior_predictive needs a classification likelihood")
    generator = context.generator(problem.device, SEED_OFFSET + int(stage.seed or 0))
    x_test = torch.as_tensor(context.dataset.x_test, device=problem.device)
    check = check_prior(problem, likelihood, x_test, context.spec.evaluate.prior_draws, generator)
    path = staging / PRIOR_PREDICTIVE_FILE
    np.savez_compressed(path, **check.arrays())  # type: ignore[arg-type]  # numpy stubs: **arrays
    return PriorPredictiveArtefact(check.metrics(), path)
