"""The curvature stage: one Laplace curvature pass at a shared mode.

Under the ``posterior`` temperature convention the mode of ``p(θ|D)^(1/T)`` does not move
with T, and neither does the curvature there: one pass per seed serves every temperature,
each of which only rescales it (:mod:`bayesflow.stages.fit`). Saves ``curvature.npz``
(``params``: the mode, ``curvature``: summed over the training data, and what the Laplace
evidence needs of the data there, also T-free: ``log_likelihood``, ``num_data`` and, for a
gaussian likelihood, ``squared_error``; :mod:`bayesflow.engines.evidence`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.methods.registry import method_of
from bayesflow.stages.artefacts import CURVATURE_FILE, CurvatureArtefact, FitArtefact
from bayesflow.stages.context import WorkflowContext
from bayesflow.stages.fit import load_posterior, starting_point

__all__ = ["curvature"]


def curvature(
    context: WorkflowContext, stage: Stage, mode: FitArtefact, staging: Path
) -> CurvatureArtefact:
    """Accumulate the curvature of ``stage``'s method at ``mode``'s mean into ``staging``."""
    from bayesflow.engines.evidence import mode_fit
    from bayesflow.engines.fit import fit as run_engine

    problem, _, tempering = context.problem(stage)
    config = context.method(stage)
    start = starting_point(load_posterior(mode.posterior, problem.device))
    engine = method_of(config).builder()(problem, tempering, config)
    x_train, y_train = context.training_data(problem.device)
    generator = context.generator(problem.device, stage.seed or 0)
    began = time.perf_counter()
    result = run_engine(engine, start, x_train, y_train, generator)
    fitted = mode_fit(problem, result.state.params, x_train, y_train, getattr(config, "batch_size", None))
    arrays = {
        "params": result.state.params.cpu().numpy(), "curvature": result.state.curvature.cpu().numpy(),
        "log_likelihood": np.float64(fitted.log_likelihood), "num_data": np.int64(fitted.num_data),
    }
    if fitted.squared_error is not None:
        arrays["squared_error"] = np.float64(fitted.squared_error)
    path = staging / CURVATURE_FILE
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy stubs: **arrays
    return CurvatureArtefact(
        path, time.perf_counter() - began, int(result.steps), [float(v) for v in result.history]
    )
