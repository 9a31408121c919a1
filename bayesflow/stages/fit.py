"""The fit stage: one method at one temperature and seed, saved as ``posterior.npz``.

Its upstream artefact, if any, says how:

- none: fit from the network's initialisation (seeded with the stage's seed);
- a :class:`~bayesflow.stages.artefacts.FitArtefact` (``from:``): start at that fit's
  mean, or, with ``parameters``, infer only those tensors with the others fixed there;
- a :class:`~bayesflow.stages.artefacts.CurvatureArtefact`: a Laplace posterior rescaled
  from a curvature pass shared by every temperature (no data pass);

every Laplace fit (a method with a ``curvature`` trait) also gets its evidence, and with
``prior_variance: auto`` the evidence-chosen prior (:func:`laplace_evidence`);
- a :class:`~bayesflow.stages.artefacts.FitGroupArtefact`: a cell of a vectorised grid,
  which only takes its own posterior out of the group.

A method with ``continual`` settings is fitted episode by episode
(:mod:`bayesflow.continual`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.errors import DivergenceError, StageError
from bayesflow.methods.laplace import EVIDENCE_PRIORS
from bayesflow.methods.registry import method_of
from bayesflow.report.bundle import link_or_copy
from bayesflow.stages.artefacts import (
    POSTERIOR_FILE,
    Artefact,
    CurvatureArtefact,
    FitArtefact,
    FitGroupArtefact,
)
from bayesflow.stages.context import WorkflowContext, describe_cell

__all__ = ["fit", "laplace_evidence", "load_posterior", "sampler_traces", "starting_point"]


def fit(
    context: WorkflowContext, stage: Stage, upstream: dict[str, Artefact], staging: Path
) -> FitArtefact:
    """Fit ``stage``'s method at its temperature and seed into ``staging``.

    Args:
        context: the workflow's spec and data.
        stage: a ``fit`` stage.
        upstream: its input artefacts by stage name (none, one fit, one curvature pass,
            or one vectorised group).
        staging: the folder that receives ``posterior.npz``.
    """
    (source,) = upstream.values() if upstream else (None,)
    if isinstance(source, FitGroupArtefact):
        return _group_cell(stage, source, staging)
    if isinstance(source, CurvatureArtefact):
        return _rescaled_laplace(context, stage, source, staging)
    if getattr(context.method(stage), "continual", None):
        return _continual(context, stage, staging)
    return _fit(context, stage, source, staging)


def _fit(
    context: WorkflowContext, stage: Stage, source: Artefact | None, staging: Path
) -> FitArtefact:
    """A fit from the initialisation, or from another fit's mean (``from:``)."""
    from bayesflow.engines.fit import fit as run_engine
    from bayesflow.subset import restrict_problem

    full_problem, _, tempering = context.problem(stage)
    problem = full_problem
    config = context.method(stage)
    generator = context.generator(problem.device, stage.seed or 0)
    if isinstance(source, FitArtefact):
        params = starting_point(load_posterior(source.posterior)).to(problem.device)
    else:
        params = problem.init_params(generator)
    embed = None
    if config.parameters is not None:
        where = f"methods.{stage.method}.parameters"
        problem, embed = restrict_problem(full_problem, params, config.parameters, where)
        params = embed.restrict(params)
    engine = method_of(config).builder()(problem, tempering, config)
    x_train, y_train = context.training_data(problem.device)
    began = time.perf_counter()
    traces: dict[str, list[float]] = {}
    try:
        result = run_engine(engine, params, x_train, y_train, generator,
                            on_state=sampler_traces(tempering, config, problem.num_data, traces))
    except DivergenceError as exc:
        raise DivergenceError(f"{describe_cell(stage)} diverged: {exc}") from exc
    evidence: dict[str, float] = {}
    if method_of(config).traits.curvature is not None:
        from bayesflow.engines.evidence import mode_fit

        fitted = mode_fit(problem, result.state.params, x_train, y_train, getattr(config, "batch_size", None))
        laplace_posterior, evidence = laplace_evidence(context, stage, problem, tempering, result.state, fitted)
        result = result._replace(posterior=laplace_posterior)
    seconds = time.perf_counter() - began
    diagnostics = {}
    if context.spec.evaluate.diagnostics:
        from bayesflow.evaluate.sampler import sampler_diagnostics

        diagnostics = sampler_diagnostics(
            problem, tempering, result.state, result.posterior, getattr(config, "chains", 1),
            x_train, y_train, chains_per_start=getattr(config, "chains_per_start", 1),
        )
    posterior = result.posterior if embed is None else embed(result.posterior)
    path = staging / POSTERIOR_FILE
    np.savez(path, **posterior_arrays(posterior, full_problem, evidence))  # type: ignore[arg-type]  # numpy stubs: **arrays
    return FitArtefact(
        path, seconds, int(result.steps), [float(value) for value in result.history], traces,
        diagnostics, evidence=evidence,
    )


def _continual(context: WorkflowContext, stage: Stage, staging: Path) -> FitArtefact:
    """Fit a ``continual`` method episode by episode (:mod:`bayesflow.continual`)."""
    from bayesflow.continual import fit_continual

    problem, _, tempering = context.problem(stage)
    data = context.dataset
    if data.episode_train is None or data.episode_test is None:
        raise StageError(f"{describe_cell(stage)}: `continual` needs data in episodes (data.episodes)")
    device = problem.device
    tensors = (*context.training_data(device), *context.test_data(device))
    generator = context.generator(device, stage.seed or 0)
    began = time.perf_counter()
    posterior, traces, steps = fit_continual(
        problem, context.method(stage), tempering, tensors,
        (data.episode_train, data.episode_test), generator,
    )
    path = staging / POSTERIOR_FILE
    np.savez(path, **posterior.to_arrays(problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
    return FitArtefact(path, time.perf_counter() - began, steps, traces["seen_average_nll"], traces)


def _rescaled_laplace(
    context: WorkflowContext, stage: Stage, source: CurvatureArtefact, staging: Path
) -> FitArtefact:
    """A Laplace fit at one temperature from a shared curvature pass: no data pass."""
    import torch

    from bayesflow.engines.evidence import ModeFit, mode_fit

    problem, _, tempering = context.problem(stage)
    config = context.method(stage)
    arrays = dict(np.load(source.file))
    engine = method_of(config).builder()(problem, tempering, config)
    params = torch.as_tensor(arrays["params"], device=problem.device)
    # The engine's own state type, with the shared pass's curvature in it.
    state = engine.init(params, context.generator(problem.device, stage.seed or 0))._replace(
        curvature=torch.as_tensor(arrays["curvature"], device=problem.device)
    )
    began = time.perf_counter()
    if "log_likelihood" in arrays:
        squared = arrays.get("squared_error")
        fitted = ModeFit(float(arrays["log_likelihood"]), int(arrays["num_data"]),
                         None if squared is None else float(squared))
    else:  # a curvature pass cached before it kept the data's fit at the mode
        fitted = mode_fit(problem, params, *context.training_data(problem.device), getattr(config, "batch_size", None))
    posterior, evidence = laplace_evidence(context, stage, problem, tempering, state, fitted)
    path = staging / POSTERIOR_FILE
    np.savez(path, **posterior_arrays(posterior, problem, evidence))  # type: ignore[arg-type]  # numpy stubs: **arrays
    return FitArtefact(
        path, time.perf_counter() - began, 0, shared_curvature_seconds=source.fit_seconds,
        evidence=evidence,
    )


def posterior_arrays(posterior: Any, problem: Any, evidence: dict[str, float]) -> dict[str, np.ndarray]:
    """The ``posterior.npz`` arrays of a fit: the posterior's, plus with ``noise_sd: auto``
    the evidence-chosen noise sd as the scalar ``noise_sd``, which its predictive uses
    (:class:`bayesflow.posterior.FittedPosterior`, the pyfunc model) instead of the spec's."""
    arrays = posterior.to_arrays(problem)
    noise = evidence.get("noise_sd_chosen")
    if noise is not None:
        arrays["noise_sd"] = np.asarray(float(noise), dtype=np.float64)
    return arrays


def laplace_evidence(
    context: WorkflowContext, stage: Stage, problem: Any, tempering: Any, state: Any, fitted: Any
) -> tuple[Any, dict[str, float]]:
    """A Laplace fit's posterior and evidence metrics from its state at the mode.

    With a normal prior the fit logs ``log_evidence`` (the untempered model's, so one
    number for every temperature of a shared mode); with ``prior_variance: auto`` (or
    ``auto_per_tensor``) its posterior uses the evidence-maximising prior variance (one,
    or one per parameter tensor; and, with ``noise_sd: auto``, noise sd) instead of the spec's, the mode staying the one found under the spec's
    prior (:func:`bayesflow.engines.evidence_prior.choose_prior`). Other priors have no
    evidence here: the posterior is the engine's as it is.
    """
    from bayesflow.engines.evidence_prior import choose_prior

    config = context.method(stage)
    builder = method_of(config).builder()
    if context.spec.prior.name not in EVIDENCE_PRIORS:
        return builder(problem, tempering, config).posterior(state), {}
    setting = getattr(config, "prior_variance", "spec")
    noise = context.spec.likelihood.noise_sd if getattr(config, "noise_sd", "spec") == "auto" else None
    if setting == "validation":
        problem, chosen_by_validation = validation_prior(context, stage, problem, tempering, state)
    try:
        chosen, state, evidence = choose_prior(
            problem, state, fitted, curvature_name=method_of(config).traits.curvature or "",
            prior_auto=setting in ("auto", "auto_per_tensor"), noise_sd=noise,
            per_tensor=setting == "auto_per_tensor",
        )
    except StageError as exc:
        raise StageError(f"{describe_cell(stage)}: {exc}") from exc
    if setting == "validation":
        evidence.update(chosen_by_validation)
    return builder(chosen, tempering, config).posterior(state), evidence


# Prior precisions `prior_variance: validation` tries: 10^-4 ... 10^4, half a decade apart.
VALIDATION_PRECISIONS = tuple(10.0 ** (exponent / 2) for exponent in range(-8, 9))
# Added to the cell's seed for the one draw of members every candidate prior shares.
VALIDATION_PRIOR_SEED = 104_729


def validation_prior(
    context: WorkflowContext, stage: Stage, problem: Any, tempering: Any, state: Any
) -> tuple[Any, dict[str, float]]:
    """``prior_variance: validation``: the problem with the one prior variance (from
    :data:`VALIDATION_PRECISIONS`) whose Laplace posterior predicts the validation rows
    best (NLL of the mean predictive of ``evaluate.n_samples`` members, one seeded draw
    shared by every candidate, through the method's ``prediction``), and the metrics
    ``prior_variance_chosen`` and ``val_nll_prior_chosen``. The mode stays the one found
    under the spec's prior (Laplace-LoRA's ``val`` option: a post-hoc grid search).

    Raises:
        StageError: the data hold no validation rows.
    """
    import math
    from dataclasses import replace

    import torch

    from bayesflow.engines.evidence import LOG_2PI
    from bayesflow.evaluate.predictive import posterior_outputs
    from bayesflow.priors import BoundPrior

    dataset = context.dataset
    if dataset.x_validation is None or dataset.y_validation is None:
        raise StageError(
            f"{describe_cell(stage)}: prior_variance: validation chooses the prior by the validation NLL, but "
            "the data hold no validation rows; set data.validation_fraction (or give validation rows), or use "
            "prior_variance: auto (the evidence)")
    config = context.method(stage)
    builder = method_of(config).builder()
    x, y = context.tensors(dataset.x_validation, dataset.y_validation, problem.device)
    samples = int(context.spec.evaluate.n_samples)
    best: tuple[float, float, Any] | None = None
    for precision in VALIDATION_PRECISIONS:
        values = torch.full_like(problem.prior_precision, precision)
        prior = BoundPrior("normal", 1 / values, values, float(0.5 * problem.dimension * (math.log(precision) - LOG_2PI)))
        candidate = replace(problem, prior_precision=prior.precision, log_prior=prior.log_prob)
        posterior = builder(candidate, tempering, config).posterior(state)
        generator = context.generator(problem.device, VALIDATION_PRIOR_SEED + (stage.seed or 0))
        with torch.no_grad():
            outputs = posterior_outputs(candidate, posterior, x, samples, generator,
                                        getattr(config, "prediction", "sampled"))
            log_probs = torch.stack([candidate.log_likelihood(member, y) for member in outputs])
            nll = float(-(torch.logsumexp(log_probs, 0) - math.log(len(outputs))).mean())
        if math.isfinite(nll) and (best is None or nll < best[0]):
            best = (nll, precision, candidate)
    if best is None:
        raise StageError(f"{describe_cell(stage)}: prior_variance: validation: no prior of the grid gave a finite "
                         "validation NLL; check the fit's outputs, or use prior_variance: auto")
    nll, precision, chosen = best
    return chosen, {"prior_variance_chosen": 1.0 / precision, "val_nll_prior_chosen": nll}


def _group_cell(stage: Stage, group: FitGroupArtefact, staging: Path) -> FitArtefact:
    """A vectorised cell's fit: its posterior and values, taken from its group's output."""
    index = group.cells.index(stage.name)
    path = staging / POSTERIOR_FILE
    link_or_copy(group.posteriors[index], path)
    values = group.fits[index]
    return FitArtefact(
        path, float(values["fit_seconds"]), int(values["steps"]), list(values.get("history", [])),
        dict(values.get("traces", {})), dict(values.get("diagnostics", {})), vectorized=True,
    )


def load_posterior(path: Path, device: Any = "cpu") -> Any:
    """The :class:`~bayesflow.engines.base.Posterior` in a ``posterior.npz``, on ``device``."""
    from bayesflow.engines.base import Posterior

    with np.load(path) as archive:
        posterior = Posterior.from_arrays(dict(archive))
    for name in ("samples", "mean", "var", "cov"):
        value = getattr(posterior, name)
        if value is not None:
            setattr(posterior, name, value.to(device))
    return posterior


def starting_point(posterior: Any) -> Any:
    """Where a method that starts ``from`` another begins: its mean (or sample mean)."""
    if posterior.mean is not None:
        return posterior.mean
    return posterior.samples.mean(0)


def sampler_traces(tempering: Any, config: Any, num_data: int, traces: dict[str, list[float]]) -> Any:
    """An ``on_state`` callback recording, per epoch, for SG-MCMC fits: the kinetic
    temperature of the momenta as a ratio to the 𝒯 = T/N they should have (1 is right;
    unit mass), and the step size the schedule gave the epoch's last step."""
    step_size = None
    if hasattr(config, "schedule") and hasattr(config, "lr"):
        from bayesflow.engines.optimize import steps_per_epoch
        from bayesflow.engines.sgmcmc import build_step_size

        total = config.epochs * steps_per_epoch(num_data, config.batch_size)
        step_size = build_step_size(config.lr, config.schedule, total)

    def record(epoch: int, state: Any) -> None:
        momenta = getattr(state, "momenta", None)
        if step_size is not None and hasattr(state, "step"):
            traces.setdefault("step_size", []).append(float(step_size(max(state.step - 1, 0))[0]))
        if momenta is None or tempering.per_datum <= 0:
            return
        # Under a mass matrix M the momenta are N(0, 𝒯 M): measure m²/M (M = 1 without one).
        mass = getattr(state, "mass", None)
        squared = momenta.detach() ** 2 if mass is None else momenta.detach() ** 2 / mass
        ratio = float(squared.mean()) / tempering.per_datum
        traces.setdefault("kinetic_temperature_ratio", []).append(ratio)

    return record
