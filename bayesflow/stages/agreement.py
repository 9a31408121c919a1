"""The evaluate stage's comparison of a fit's predictive with ``evaluate.reference``'s.

The points compared are the test rows, or the training rows when none are held out
(``data.test_fraction: 0``, as in the Pima workflow): the scores measure how well a
posterior approximation reproduces the reference's predictive, which needs inputs, not
labels. The reference is the evaluation of the reference method's fit of the same seed
(at the same temperature or the stated one), whose arrays hold its predictive at those
points, or the probabilities of a reference file, which travel with the data. The
scores (:mod:`bayesflow.evaluate.agreement`): ``agreement`` and ``total_variation`` for
classification, ``wasserstein_2`` for regression. The reference's own evaluation only
notes that it is the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.dag.reference import is_reference_cell
from bayesflow.data.reference import comparison_rows
from bayesflow.errors import StageError
from bayesflow.stages.artefacts import EvaluationArtefact
from bayesflow.stages.context import WorkflowContext, describe_cell
from bayesflow.temperature import TEMPERATURE_FREE

__all__ = ["TRAINING_PREFIX", "compare_with_reference"]

# The arrays of a predictive at the training inputs (an evaluation without test rows).
TRAINING_PREFIX = "training_"
REFERENCE_NOTE = (
    "this fit is evaluate.reference: the other fits' agreement, total_variation or "
    "wasserstein_2 measure their predictive against its"
)


def compare_with_reference(
    context: WorkflowContext, stage: Stage, problem: Any, likelihood: Any, posterior: Any,
    arrays: dict[str, np.ndarray], reference: EvaluationArtefact | None, generator: Any,
    prediction: str = "sampled",
) -> tuple[dict[str, float], dict[str, str], dict[str, np.ndarray]]:
    """The scores of this fit against the reference, their convention lines, and the
    arrays this evaluation adds (its predictive at the training inputs, when no rows are
    held out, for the fits compared with it).

    Args:
        arrays: the evaluation's own per-point arrays (its predictive on the test rows).
        reference: the reference method's evaluation of this cell; None for a reference
            file, or when this cell is the reference.
        generator: draws the posterior samples of a predictive at the training inputs.
        prediction: how the posterior predicts there (``sampled`` or ``linearized``).
    """
    from bayesflow.evaluate.agreement import compare_predictives
    from bayesflow.evaluate.conventions import CONVENTIONS

    added: dict[str, np.ndarray] = {}
    prefix = ""
    if not len(context.dataset.y_test):
        prefix = TRAINING_PREFIX
        added = _training_predictive(context, problem, likelihood, posterior, generator, prediction)
    spec = context.spec.evaluate.reference
    if spec.method is not None and reference is None:
        if is_reference_cell(context.spec, str(stage.method), stage.temperature):
            return {}, {"reference": REFERENCE_NOTE}, added
        return {}, {}, added  # a temperature-free fit with a tempered reference
    own = _predictive({**arrays, **added}, prefix, likelihood, f"{describe_cell(stage)}'s evaluation")
    if spec.file is not None:
        assert context.dataset.reference is not None, "the data carry the reference file's probabilities"
        target = {"probabilities": context.dataset.reference}
        source = f"the probabilities of {spec.file}"
    else:
        assert reference is not None
        target = _predictive(_read(reference), prefix, likelihood, "the reference's evaluation")
        temperature = TEMPERATURE_FREE if stage.temperature is None else f"{stage.temperature:g}"
        source = f"the predictive of {spec.method!r} (seed {stage.seed}" + (
            f", T = {spec.temperature:g})" if spec.temperature is not None else f", T = {temperature})")
    scores = compare_predictives(own, target)
    rows, which = comparison_rows(context.dataset)
    notes = {name: f"{CONVENTIONS[name]}; on the {rows} {which}, against {source}" for name in scores}
    return scores, notes, added


def _training_predictive(
    context: WorkflowContext, problem: Any, likelihood: Any, posterior: Any, generator: Any,
    prediction: str,
) -> dict[str, np.ndarray]:
    """The predictive at the training inputs, as the arrays an evaluation saves."""
    from bayesflow.evaluate.predictive import posterior_outputs

    inputs, _ = context.training_data(problem.device)
    outputs = posterior_outputs(
        problem, posterior, inputs, context.spec.evaluate.n_samples, generator, prediction
    )
    if likelihood.task == "classification":
        probabilities = likelihood.probabilities(outputs).double().mean(dim=0)
        return {f"{TRAINING_PREFIX}probabilities": probabilities.cpu().numpy()}
    means = outputs.detach().double().cpu()
    means = means.squeeze(-1) if means.ndim == 3 else means
    return {
        f"{TRAINING_PREFIX}predictive_mean": means.mean(dim=0).numpy(),
        f"{TRAINING_PREFIX}epistemic_variance": means.var(dim=0, unbiased=False).numpy(),
    }


def _predictive(arrays: dict[str, np.ndarray], prefix: str, likelihood: Any, what: str) -> dict[str, np.ndarray]:
    """The predictive at the compared points from an evaluation's arrays: class
    probabilities, or a Gaussian's mean and variance (noise σ² plus the variance of the
    samples' means)."""
    if likelihood.task == "classification" and f"{prefix}probabilities" in arrays:
        return {"probabilities": arrays[f"{prefix}probabilities"]}
    if likelihood.task == "regression" and f"{prefix}predictive_mean" in arrays:
        variance = arrays[f"{prefix}epistemic_variance"] + likelihood.noise_sd**2
        return {"mean": arrays[f"{prefix}predictive_mean"], "variance": variance}
    raise StageError(
        f"{what} holds no predictive at the compared points (arrays {sorted(arrays)}); "
        "rerun it with --force"
    )


def _read(evaluation: EvaluationArtefact) -> dict[str, np.ndarray]:
    if evaluation.file is None:
        return {}
    with np.load(evaluation.file) as saved:
        return {name: saved[name] for name in saved.files}
