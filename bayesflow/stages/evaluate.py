"""The evaluate stage: a fitted posterior's metrics on the test set, and on the
validation rows when the data hold some out (``val_*``, beside ``test_*``).

Without a test set (``data.test_fraction: 0``) the predictive metrics are skipped, with a
note under ``conventions["predictive"]``.

Beyond the predictive metrics (``docs/metrics.md``): with ``evaluate.ksd``, the kernelised
Stein discrepancy of its samples against the tempered target; with ``evaluate.reference``,
its distances to the reference method's fit at the same temperature and seed (the stage's
second input), and the agreement of the two predictives (:mod:`bayesflow.stages.agreement`,
the reference's evaluation its third input); with ``evaluate.statements``, a language
model's last-word scores (:mod:`bayesflow.stages.statements`); with named shift sets in the
data (``multiple_choice``'s ``data.shift``), each set's predictive metrics and its AUROCs
against the test set under the test set's draw (``shift_<metric>_<name>``,
:mod:`bayesflow.evaluate.shift`). Saves the per-point arrays (probabilities,
uncertainties; a shift set's under ``shift_<name>_``) as ``evaluation.npz`` when there are any.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.dag.evaluators import active_evaluators
from bayesflow.dag.plan import Stage
from bayesflow.errors import StageError
from bayesflow.llm.dropout import stochastic_passes
from bayesflow.stages.artefacts import EVALUATION_FILE, EvaluationArtefact, FitArtefact
from bayesflow.stages.context import WorkflowContext, describe_cell
from bayesflow.stages.fit import load_posterior

__all__ = ["KSD_CHUNK", "chosen_noise", "evaluate", "prediction_of"]

# Samples whose scores one vmapped gradient call computes for the KSD: 64 samples of the
# digits MLP on its 898 training points hold 64 × 898 × 64 floats (15 MB) of activations.
KSD_CHUNK = 64
# Offsets of the generators' seeds from the stage's seed, so that the predictive's and
# the KSD's draws are neither each other's nor the fit's.
PREDICTIVE_SEED_OFFSET = 10_000
KSD_SEED_OFFSET = 30_000
VALIDATION_SEED_OFFSET = 40_000
# The note (an MLflow tag, convention.predictive) of an evaluation without held-out data.
NO_TEST_SET = (
    "skipped: no held-out rows (data.test_fraction is 0), so no predictive metrics; the "
    "KSD and the distances to evaluate.reference need none"
)


def evaluate(
    context: WorkflowContext, stage: Stage, fitted: FitArtefact, reference: FitArtefact | None,
    staging: Path, judged: EvaluationArtefact | None = None,
) -> EvaluationArtefact:
    """Evaluate ``fitted`` on the test set (and against ``reference``, whose evaluation
    ``judged`` holds its predictive: :mod:`bayesflow.stages.agreement`) into ``staging``.

    Raises:
        StageError: a metric is not finite (the fit may have diverged), or the reference
            has zero variance in some parameter.
    """
    import torch

    from bayesflow.evaluate import Evaluation, describe, evaluate_full

    problem, likelihood, tempering = context.problem(stage)
    likelihood = chosen_noise(likelihood, fitted)
    posterior = load_posterior(fitted.posterior, problem.device)
    generator = context.generator(problem.device, PREDICTIVE_SEED_OFFSET + int(stage.seed or 0))
    x_test, y_test = context.test_data(problem.device)
    settings = context.spec.evaluate
    # MC dropout's members are passes with the adapters' dropout on, seeded as the draw is
    # (load_posterior(...).predict seeds its passes alike); a no-op for every other method.
    with stochastic_passes(stage.engine, problem.module, PREDICTIVE_SEED_OFFSET + int(stage.seed or 0)):
        x_ood = None
        if context.dataset.x_ood is not None:
            x_ood = torch.as_tensor(context.dataset.x_ood, device=problem.device)
        result = Evaluation({})  # an energy (a fixed target, no data) has no predictive
        if likelihood.task != "energy" and not len(y_test):
            result = Evaluation({}, conventions={"predictive": NO_TEST_SET})
        elif likelihood.task != "energy":
            result = evaluate_full(
                problem, likelihood, posterior, x_test, y_test,
                n_samples=settings.n_samples, generator=generator, ece_bins=settings.ece_bins,
                ece_binning=settings.ece_binning, coverage_levels=settings.coverage_levels,
                x_ood=x_ood, prediction=prediction_of(context, stage, posterior),
                shifts=[(name, *context.tensors(x, y, problem.device)) for name, x, y in context.dataset.shifts],
            )
        metrics = {name: float(value) for name, value in result.metrics.items()}
        conventions = dict(result.conventions)
        if likelihood.task != "energy" and context.dataset.has_validation:
            validation = _validation_metrics(context, stage, problem, likelihood, posterior)
            metrics.update(validation[0])
            conventions.update(validation[1])
        if settings.ksd is not None and stage.temperature:
            stein = _stein_discrepancy(context, stage, problem, tempering, posterior, settings.ksd)
            metrics.update(stein[0])
            conventions.update(stein[1])
        if reference is not None:
            distances = _reference_distances(stage, posterior, reference)
            metrics.update(distances)
            conventions.update(describe(distances))
        arrays = dict(result.arrays)
        if settings.reference is not None and likelihood.task != "energy":
            from bayesflow.stages.agreement import compare_with_reference

            scores, notes, added = compare_with_reference(
                context, stage, problem, likelihood, posterior, arrays, judged, generator,
                prediction_of(context, stage, posterior),
            )
            metrics.update(scores)
            conventions.update(notes)
            arrays.update(added)
        for evaluator in active_evaluators(settings):  # registered extras: bayesflow.dag.evaluators
            scores, notes, added = evaluator.load()(context, stage, problem, posterior)
            metrics.update(scores)
            conventions.update(notes)
            arrays.update(added)
    bad = [name for name, value in metrics.items() if not np.isfinite(value)]
    if bad:
        raise StageError(f"{describe_cell(stage)}: metrics {bad} are not finite; the fit may have diverged")
    file = None
    if arrays:
        file = staging / EVALUATION_FILE
        np.savez_compressed(file, **arrays)  # type: ignore[arg-type]  # numpy stubs: **arrays
    return EvaluationArtefact(metrics, conventions, file)


def chosen_noise(likelihood: Any, fitted: FitArtefact) -> Any:
    """The likelihood a fit's predictive uses: with ``noise_sd: auto`` the fit's
    evidence-chosen noise sd (``noise_sd_chosen``, which its posterior was built on)
    instead of the spec's ``likelihood.noise_sd``."""
    from dataclasses import replace

    noise = fitted.evidence.get("noise_sd_chosen")
    return likelihood if noise is None else replace(likelihood, noise_sd=float(noise))


def prediction_of(context: WorkflowContext, stage: Stage, posterior: Any) -> str:
    """For a Gaussian posterior, the method's ``prediction`` unless ``sampled``, else
    ``evaluate.prediction`` (``linearized``, ``closed_form`` and ``linearized_mc`` as
    well as ``sampled``); samples are always used as they are."""
    if posterior.kind != "gaussian":
        return "sampled"
    own = str(getattr(context.method(stage), "prediction", "sampled"))
    if own != "sampled":
        return own
    return str(context.spec.evaluate.prediction)


def _validation_metrics(
    context: WorkflowContext, stage: Stage, problem: Any, likelihood: Any, posterior: Any
) -> tuple[dict[str, float], dict[str, str]]:
    """The test set's predictive metrics on the validation rows, named ``val_*``, from a
    draw of samples of their own (the test metrics' draw is the one it always was)."""
    from bayesflow.evaluate import evaluate_full
    from bayesflow.evaluate.conventions import on_validation

    settings = context.spec.evaluate
    dataset = context.dataset
    assert dataset.x_validation is not None and dataset.y_validation is not None
    x, y = context.tensors(dataset.x_validation, dataset.y_validation, problem.device)
    result = evaluate_full(
        problem, likelihood, posterior, x, y, n_samples=settings.n_samples,
        generator=context.generator(problem.device, VALIDATION_SEED_OFFSET + int(stage.seed or 0)),
        ece_bins=settings.ece_bins, ece_binning=settings.ece_binning,
        coverage_levels=settings.coverage_levels, prediction=prediction_of(context, stage, posterior),
    )
    return on_validation({name: float(value) for name, value in result.metrics.items()}, result.conventions)


def _stein_discrepancy(
    context: WorkflowContext, stage: Stage, problem: Any, tempering: Any, posterior: Any,
    settings: Any,
) -> tuple[dict[str, float], dict[str, str]]:
    """``ksd``: the KSD of the posterior's samples against the score of the full-batch
    tempered log posterior N·f(θ)/T (:mod:`bayesflow.temperature`); and
    ``ksd_posteriors_example``: the same samples under the estimator of the posteriors
    paper's Table 3 (:func:`~bayesflow.evaluate.stein.posteriors_example_ksd`, the score
    divided by N), so that a run's numbers can be put beside the paper's. With their
    convention lines."""
    import torch

    from bayesflow.evaluate import CONVENTIONS, draw_samples
    from bayesflow.evaluate.stein import (
        kernelized_stein_discrepancy,
        posteriors_example_ksd,
        stein_scores,
    )

    generator = context.generator(problem.device, KSD_SEED_OFFSET + int(stage.seed or 0))
    samples = draw_samples(posterior, settings.max_samples, generator)
    batch = context.training_data(problem.device)

    def log_target(params: Any) -> Any:
        log_posterior = problem.log_posterior(params, batch, tempering.prior_weight)
        return log_posterior / tempering.per_datum

    # vmap over all samples at once holds every sample's activations on the whole
    # training set; chunks keep that to KSD_CHUNK samples' worth.
    scores = torch.cat([stein_scores(log_target, piece) for piece in samples.split(KSD_CHUNK)])
    value = kernelized_stein_discrepancy(
        samples, scores, kernel=settings.kernel, bandwidth=settings.bandwidth
    )
    example = posteriors_example_ksd(samples, scores / problem.num_data)
    where = (
        f"{samples.shape[0]} samples, target the full-batch posterior tempered at "
        f"T = {tempering.temperature:g}"
    )
    conventions = {
        "ksd": f"{CONVENTIONS['ksd']}; here kernel {settings.kernel}, h = {settings.bandwidth}, {where}",
        "ksd_posteriors_example": (
            "the estimator of the posteriors paper's Table 3 (its examples/pyro_pima_indians/"
            "ksd.py): Gaussian kernel h = 1, cross terms of the opposite sign, score divided "
            "by N, sqrt of the mean over all pairs; not a Stein discrepancy (exact samples "
            f"do not give ~0); {where}"
        ),
    }
    return {"ksd": value, "ksd_posteriors_example": example}, conventions


def _reference_distances(stage: Stage, posterior: Any, reference: FitArtefact) -> dict[str, float]:
    """``reference_mean_error`` and ``reference_variance_error`` against a reference fit."""
    from bayesflow.evaluate.reference import compare_to_reference, posterior_moments

    mean, var = posterior_moments(load_posterior(reference.posterior))
    if not (var > 0).all():
        raise StageError(
            f"{describe_cell(stage)}: the reference fit ({stage.name} reads evaluate.reference's fit) "
            f"has zero variance in {int((var <= 0).sum())} parameters, so it cannot serve as "
            "a reference; give it more samples or choose a sampler as evaluate.reference"
        )
    return compare_to_reference(posterior, mean, var)
