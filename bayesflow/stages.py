"""What each kind of stage computes: fit, evaluate, plot and report.

:class:`StageRunner` is the ``run_stage`` function the executor calls. It holds what
every stage of one workflow shares (the spec and the loaded data) and writes each
stage's files into the staging folder it is given; it never logs (the tracking hook
does that around it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.dag.cache import Entry
from bayesflow.dag.plan import Stage
from bayesflow.data import Dataset
from bayesflow.errors import BayesflowError, DivergenceError, StageError
from bayesflow.methods.registry import method_of, traits_of
from bayesflow.spec.load import LoadedSpec

__all__ = ["POSTERIOR_FILE", "StageRunner", "fit_parameters"]

POSTERIOR_FILE = "posterior.npz"
EVALUATION_FILE = "evaluation.npz"
PRIOR_PREDICTIVE_FILE = "prior_predictive.npz"
CURVATURE_FILE = "curvature.npz"
# Samples whose scores one vmapped gradient call computes for the KSD: 64 samples of the
# digits MLP on its 898 training points hold 64 × 898 × 64 floats (15 MB) of activations.
KSD_CHUNK = 64


def fit_parameters(loaded: LoadedSpec, stage: Stage) -> dict[str, Any]:
    """The MLflow params of a fit: the sweep coordinates plus the flattened method config."""
    spec = loaded.spec
    method = spec.methods[stage.method or ""]
    params: dict[str, Any] = {
        "method": stage.method,
        "engine": stage.engine,
        "temperature": 0.0 if stage.temperature is None else stage.temperature,
        "temperature_shared": stage.temperature is None,
        "seed": stage.seed,
        "temperature_convention": spec.temperature_convention,
        "model": spec.model.name,
        "likelihood": spec.likelihood.name,
        "prior": spec.prior.name,
        "dataset": spec.data.name,
    }
    flat = _flatten(method.model_dump(mode="json", by_alias=True), "")
    params.update({key: value for key, value in flat.items() if key != "engine"})
    if spec.prior.name == "diag_normal":
        params["prior_variance"] = spec.prior.variance
    # Fitted as one cell of a vectorised grid (execution.vectorize, a fit_group stage).
    params["vectorized"] = bool(stage.config.get("vectorized", False))
    return params


def _flatten(mapping: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


@dataclass
class StageRunner:
    """Computes stages of one workflow.

    Attributes:
        loaded: the validated spec.
        dataset: the loaded data.
        report_dir: where this run's report and figures go.
        context: filled in by the caller before plot/report stages run
            (``run_id``, ``tracking_uri``).
    """

    loaded: LoadedSpec
    dataset: Dataset
    report_dir: Path
    context: dict[str, Any] = field(default_factory=dict)

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        runner = {
            "fit": self.fit,
            "fit_group": self.fit_group,
            "evaluate": self.evaluate,
            "plot": self.plot,
            "report": self.report,
            "prior_predictive": self.prior_predictive,
            "curvature": self.curvature,
        }[stage.kind]
        return runner(stage, inputs, staging)

    # ------------------------------------------------------------------ torch side

    def _device(self) -> Any:
        import torch

        threads = self.loaded.spec.execution.threads
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        wanted = self.loaded.spec.execution.device
        if wanted == "auto":
            wanted = "cuda" if torch.cuda.is_available() else "cpu"
        if wanted == "cuda" and not torch.cuda.is_available():
            raise StageError(
                "execution.device is `cuda` but torch sees no CUDA device; "
                "set execution.device=cpu or auto"
            )
        return torch.device(wanted)

    def _problem(self, stage: Stage) -> tuple[Any, Any, Any]:
        """The flat-parameter problem, the likelihood and the tempering of a fit stage."""
        import torch

        from bayesflow.likelihoods import build_likelihood
        from bayesflow.models import build_model
        from bayesflow.priors import build_prior, none
        from bayesflow.problem import build_problem
        from bayesflow.temperature import Tempering

        spec = self.loaded.spec
        likelihood = build_likelihood(spec.likelihood.model_dump())
        prior = build_prior(spec.prior.model_dump())
        if stage.engine and not traits_of(stage.engine).uses_prior:
            prior = none()
        outputs = likelihood.num_outputs(self.dataset.num_classes)
        torch.manual_seed(stage.seed or 0)
        module = build_model(spec.model.model_dump(), self.dataset.num_features, outputs)
        problem = build_problem(module, likelihood, prior, len(self.dataset.y_train), self._device())
        temperature = 1.0 if stage.temperature is None else stage.temperature
        tempering = Tempering(temperature, problem.num_data, spec.temperature_convention)
        return problem, likelihood, tempering

    def _tensors(self, inputs: np.ndarray, targets: np.ndarray, device: Any) -> tuple[Any, Any]:
        import torch

        return torch.as_tensor(inputs, device=device), torch.as_tensor(targets, device=device)

    def fit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Fit one method at one temperature and seed; save ``posterior.npz``.

        A method with ``parameters`` is fitted on the problem restricted to those tensors,
        the others fixed at the ``from`` method's values; its posterior is embedded back
        into the full flat space before it is saved.

        A cell of a vectorised grid (its input a ``fit_group`` stage) only copies its
        posterior and fit values out of the group's output.
        """
        if stage.config.get("vectorized"):
            return _group_cell(stage, inputs, staging)
        shared = [entry for entry in inputs.values() if entry.values.get("kind") == "curvature"]
        if shared:
            return self._rescaled_laplace(stage, shared[0], staging)
        if getattr(self.loaded.spec.methods[stage.method or ""], "continual", None):
            return self._continual(stage, staging)
        import torch

        from bayesflow.engines.base import Posterior
        from bayesflow.engines.fit import fit
        from bayesflow.subset import restrict_problem

        full_problem, _, tempering = self._problem(stage)
        problem = full_problem
        config = self.loaded.spec.methods[stage.method or ""]
        generator = torch.Generator(device=problem.device).manual_seed(int(stage.seed or 0))
        if inputs:
            (source,) = inputs.values()
            start = _starting_point(Posterior.from_arrays(dict(np.load(source.file(POSTERIOR_FILE)))))
            params = start.to(problem.device)
        else:
            params = problem.init_params(generator)
        embed = None
        if config.parameters is not None:
            where = f"methods.{stage.method}.parameters"
            problem, embed = restrict_problem(full_problem, params, config.parameters, where)
            params = embed.restrict(params)
        engine = method_of(stage.engine or "").builder()(problem, tempering, config)
        x_train, y_train = self._tensors(self.dataset.x_train, self.dataset.y_train, problem.device)
        began = time.perf_counter()
        try:
            traces: dict[str, list[float]] = {}
            result = fit(engine, params, x_train, y_train, generator,
                         on_state=_sampler_traces(tempering, config, problem.num_data, traces))
        except DivergenceError as exc:
            raise DivergenceError(f"{_cell(stage)} diverged: {exc}") from exc
        seconds = time.perf_counter() - began
        diagnostics = {}
        if self.loaded.spec.evaluate.diagnostics:
            from bayesflow.evaluate.sampler import sampler_diagnostics

            chains = getattr(config, "chains", 1) if getattr(config, "keep", "all") == "all" else 1
            diagnostics = sampler_diagnostics(
                problem, tempering, result.state, result.posterior, chains, x_train, y_train
            )
        posterior = result.posterior if embed is None else embed(result.posterior)
        np.savez(staging / POSTERIOR_FILE, **posterior.to_arrays(full_problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
        return {
            "fit_seconds": seconds,
            "steps": int(result.steps),
            "history": [float(value) for value in result.history],
            "traces": traces,
            "diagnostics": diagnostics,
        }

    def fit_group(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Fit every cell of a vectorised SG-MCMC grid as one batched engine run.

        The group has K = cells × C chains (C = the method's ``chains``), chain k at its
        cell's temperature (:class:`~bayesflow.temperature.ChainTempering`). Each cell's C
        chains start where its one-by-one fit's do (``init_params`` and
        :func:`~bayesflow.engines.sgmcmc.chain_starts` under a generator seeded with the
        cell's seed); the momenta, the noise and the minibatch order come from one
        generator seeded by the group's key. Writes ``posterior-<i>.npz`` for cell i and
        returns ``cells`` (the cells' fit stage names) and ``fits`` (each cell's values:
        the group's steps, its seconds divided among the cells, the cell's own loss trace
        and sampler diagnostics).
        """
        import torch

        from bayesflow.engines.base import Posterior
        from bayesflow.engines.fit import fit
        from bayesflow.engines.sgmcmc import chain_starts
        from bayesflow.temperature import ChainTempering, Tempering

        spec = self.loaded.spec
        cells = stage.config["cells"]
        config = spec.methods[stage.method or ""]
        if "temperatures" not in traits_of(config).vectorizes:
            raise StageError(f"{stage.name}: method {stage.engine} cannot run as a vectorised grid")
        per_cell = config.chains
        problem, _, _ = self._problem(stage)
        starts = []
        for cell in cells:
            generator = torch.Generator(device=problem.device).manual_seed(int(cell["seed"]))
            params = problem.init_params(generator)
            starts.append(chain_starts(problem, params, per_cell, generator))
        temperatures = tuple(float(cell["temperature"]) for cell in cells for _ in range(per_cell))
        tempering = ChainTempering(temperatures, problem.num_data, spec.temperature_convention)
        engine = method_of(stage.engine or "").builder()(problem, tempering, config)
        chain_losses: list[Any] = []
        histories: list[list[float]] = [[] for _ in cells]

        def update(state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
            state, aux = engine.update(state, batch)
            chain_losses.append(aux["chain_loss"])
            return state, aux

        def on_epoch(epoch: int, loss: float) -> None:
            # One read-back per epoch, as fit itself does: each cell's mean −f.
            per_chain = torch.stack(chain_losses).mean(0).reshape(len(cells), per_cell)
            for history, value in zip(histories, per_chain.mean(1).tolist()):
                history.append(float(value))
            chain_losses.clear()

        x_train, y_train = self._tensors(self.dataset.x_train, self.dataset.y_train, problem.device)
        generator = torch.Generator(device=problem.device).manual_seed(int(stage.key, 16) % 2**63)
        began = time.perf_counter()
        try:
            result = fit(
                engine._replace(update=update), torch.cat(starts), x_train, y_train, generator,
                on_epoch=on_epoch,
            )
        except DivergenceError as exc:
            raise DivergenceError(
                f"method {stage.method!r} ({stage.engine}), the vectorised grid of "
                f"{len(cells)} cells, diverged: {exc}"
            ) from exc
        seconds = time.perf_counter() - began
        assert result.posterior.samples is not None  # samplers' posteriors are samples
        samples = result.posterior.samples.reshape(len(cells), -1, problem.dimension)
        fits = []
        for index, cell in enumerate(cells):
            posterior = Posterior(samples=samples[index])
            np.savez(staging / f"posterior-{index}.npz", **posterior.to_arrays(problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
            diagnostics = {}
            if spec.evaluate.diagnostics:
                from bayesflow.evaluate.sampler import sampler_diagnostics

                rows = slice(index * per_cell, (index + 1) * per_cell)
                state = _chain_slice(result.state, rows)
                chains = per_cell if config.keep == "all" else 1
                cell_tempering = Tempering(
                    float(cell["temperature"]), problem.num_data, spec.temperature_convention
                )
                diagnostics = sampler_diagnostics(
                    problem, cell_tempering, state, posterior, chains, x_train, y_train
                )
            fits.append({
                "fit_seconds": seconds / len(cells),
                "steps": int(result.steps),
                "history": histories[index],
                "diagnostics": diagnostics,
            })
        return {"cells": [cell["name"] for cell in cells], "fits": fits, "group_seconds": seconds}

    def evaluate(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Evaluate a fitted posterior on the test set; with ``evaluate.ksd``, against its
        tempered target; with ``evaluate.reference``, against the reference method's fit
        (the stage's second input)."""
        import torch

        from bayesflow.evaluate import Evaluation, describe, evaluate_full

        fit_name = stage.name.replace("evaluate/", "fit/", 1)
        problem, likelihood, tempering = self._problem(stage)
        posterior = _load_posterior(inputs[fit_name], problem.device)
        generator = torch.Generator(device=problem.device).manual_seed(10_000 + int(stage.seed or 0))
        x_test, y_test = self._tensors(self.dataset.x_test, self.dataset.y_test, problem.device)
        settings = self.loaded.spec.evaluate
        x_ood = None
        if self.dataset.x_ood is not None:
            x_ood = torch.as_tensor(self.dataset.x_ood, device=problem.device)
        result = Evaluation({})  # an energy (a fixed target, no data) has no predictive
        if likelihood.task != "energy":
            result = evaluate_full(
                problem, likelihood, posterior, x_test, y_test,
                n_samples=settings.n_samples, generator=generator, ece_bins=settings.ece_bins,
                ece_binning=settings.ece_binning, coverage_levels=settings.coverage_levels,
                x_ood=x_ood, prediction=self._prediction(stage, posterior),
            )
        metrics = {name: float(value) for name, value in result.metrics.items()}
        conventions = dict(result.conventions)
        if settings.ksd is not None and stage.temperature:
            metrics["ksd"], conventions["ksd"] = self._stein_discrepancy(
                stage, problem, tempering, posterior, settings.ksd
            )
        references = [entry for name, entry in inputs.items() if name != fit_name]
        if references:
            distances = _reference_distances(stage, posterior, references[0])
            metrics.update(distances)
            conventions.update(describe(distances))
        bad = [name for name, value in metrics.items() if not np.isfinite(value)]
        if bad:
            raise StageError(f"{_cell(stage)}: metrics {bad} are not finite; the fit may have diverged")
        if result.arrays:
            np.savez_compressed(staging / EVALUATION_FILE, **result.arrays)  # type: ignore[arg-type]  # numpy stubs: **arrays
        return {"metrics": metrics, "conventions": conventions}

    def _stein_discrepancy(
        self, stage: Stage, problem: Any, tempering: Any, posterior: Any, settings: Any
    ) -> tuple[float, str]:
        """The KSD of the posterior's samples against the score of the full-batch tempered
        log posterior N·f(θ)/T (:mod:`bayesflow.temperature`), and its convention line."""
        import torch

        from bayesflow.evaluate import CONVENTIONS, draw_samples
        from bayesflow.evaluate.stein import kernelized_stein_discrepancy, stein_scores

        generator = torch.Generator(device=problem.device).manual_seed(30_000 + int(stage.seed or 0))
        samples = draw_samples(posterior, settings.max_samples, generator)
        batch = self._tensors(self.dataset.x_train, self.dataset.y_train, problem.device)

        def log_target(params: Any) -> Any:
            log_posterior = problem.log_posterior(params, batch, tempering.prior_weight)
            return log_posterior / tempering.per_datum

        # vmap over all samples at once holds every sample's activations on the whole
        # training set; chunks keep that to KSD_CHUNK samples' worth.
        scores = torch.cat([stein_scores(log_target, piece) for piece in samples.split(KSD_CHUNK)])
        value = kernelized_stein_discrepancy(
            samples, scores, kernel=settings.kernel, bandwidth=settings.bandwidth
        )
        convention = (
            f"{CONVENTIONS['ksd']}; here kernel {settings.kernel}, h = {settings.bandwidth}, "
            f"{samples.shape[0]} samples, target the full-batch posterior tempered at "
            f"T = {tempering.temperature:g}"
        )
        return value, convention

    def curvature(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """One Laplace curvature pass at the shared mode, for every temperature to rescale."""
        import torch

        from bayesflow.engines.base import Posterior
        from bayesflow.engines.fit import fit

        problem, _, tempering = self._problem(stage)
        (source,) = inputs.values()
        start = _starting_point(Posterior.from_arrays(dict(np.load(source.file(POSTERIOR_FILE)))))
        engine = method_of(stage.engine or "").builder()(problem, tempering, self.loaded.spec.methods[stage.method or ""])
        x_train, y_train = self._tensors(self.dataset.x_train, self.dataset.y_train, problem.device)
        generator = torch.Generator(device=problem.device).manual_seed(int(stage.seed or 0))
        began = time.perf_counter()
        result = fit(engine, start.to(problem.device), x_train, y_train, generator)
        np.savez(staging / CURVATURE_FILE, params=result.state.params.cpu().numpy(),
                 curvature=result.state.curvature.cpu().numpy())
        return {"kind": "curvature", "fit_seconds": time.perf_counter() - began,
                "steps": int(result.steps), "history": [float(v) for v in result.history]}

    def _continual(self, stage: Stage, staging: Path) -> dict[str, Any]:
        """Fit a ``continual`` method episode by episode (:mod:`bayesflow.continual`)."""
        import torch

        from bayesflow.continual import fit_continual

        problem, _, tempering = self._problem(stage)
        data = self.dataset
        if data.episode_train is None or data.episode_test is None:
            raise StageError(f"{_cell(stage)}: `continual` needs data in episodes (data.episodes)")
        device = problem.device
        tensors = (
            *self._tensors(data.x_train, data.y_train, device),
            *self._tensors(data.x_test, data.y_test, device),
        )
        generator = torch.Generator(device=device).manual_seed(int(stage.seed or 0))
        began = time.perf_counter()
        posterior, traces, steps = fit_continual(
            problem, self.loaded.spec.methods[stage.method or ""], tempering, tensors,
            (data.episode_train, data.episode_test), generator,
        )
        np.savez(staging / POSTERIOR_FILE, **posterior.to_arrays(problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
        return {
            "fit_seconds": time.perf_counter() - began, "steps": steps,
            "history": traces["seen_average_nll"], "traces": traces, "diagnostics": {},
        }

    def _rescaled_laplace(self, stage: Stage, source: Entry, staging: Path) -> dict[str, Any]:
        """A Laplace fit at one temperature from a shared curvature pass: no data pass."""
        import torch

        from bayesflow.methods.laplace import LaplaceState

        problem, _, tempering = self._problem(stage)
        arrays = np.load(source.file(CURVATURE_FILE))
        state = LaplaceState(
            torch.as_tensor(arrays["params"], device=problem.device),
            torch.as_tensor(arrays["curvature"], device=problem.device),
        )
        engine = method_of(stage.engine or "").builder()(problem, tempering, self.loaded.spec.methods[stage.method or ""])
        began = time.perf_counter()
        posterior = engine.posterior(state)
        np.savez(staging / POSTERIOR_FILE, **posterior.to_arrays(problem))
        return {
            "fit_seconds": time.perf_counter() - began,
            "steps": 0,
            "history": [],
            "shared_curvature_seconds": source.values["fit_seconds"],
            "diagnostics": {},
        }

    def _prediction(self, stage: Stage, posterior: Any) -> str:
        """``linearized`` when the method or ``evaluate.prediction`` asks for it and the
        posterior is Gaussian; samples are always used as they are."""
        if posterior.kind != "gaussian":
            return "sampled"
        method = self.loaded.spec.methods[stage.method or ""]
        if getattr(method, "prediction", "sampled") == "linearized":
            return "linearized"
        return self.loaded.spec.evaluate.prediction

    def prior_predictive(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Class probabilities that draws from the prior give the test inputs."""
        import torch

        from bayesflow.evaluate.prior_predictive import prior_predictive

        problem, likelihood, _ = self._problem(stage)
        if likelihood.task != "classification":
            raise StageError("evaluate.prior_predictive needs a classification likelihood")
        generator = torch.Generator(device=problem.device).manual_seed(20_000 + int(stage.seed or 0))
        x_test = torch.as_tensor(self.dataset.x_test, device=problem.device)
        check = prior_predictive(
            problem, likelihood, x_test, self.loaded.spec.evaluate.prior_draws, generator
        )
        np.savez_compressed(staging / PRIOR_PREDICTIVE_FILE, **check.arrays())  # type: ignore[arg-type]  # numpy stubs: **arrays
        return {"metrics": check.metrics()}

    # ---------------------------------------------------------------- report side

    def _results(self) -> Any:
        from bayesflow.api import results

        return results(self.context["run_id"], tracking_uri=self.context["tracking_uri"])

    def plot(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Draw one figure of the spec's ``plots`` as a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot

        from bayesflow.report.figures import PLOT_METRICS, apply_theme, metric_vs_temperature

        name = stage.config["plot"]
        apply_theme()
        figure, axis = pyplot.subplots(figsize=(6.5, 4.2))
        metric_vs_temperature(self._results(), PLOT_METRICS[name], ax=axis)
        figure.tight_layout()
        target = self.report_dir / "figures" / f"{name}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(target, dpi=110)
        pyplot.close(figure)
        return {"figure": str(target)}

    def report(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Execute the report notebook and convert it to one HTML file."""
        from bayesflow.report.render import render_report

        spec = self.loaded.spec
        parameters = {
            "run_id": self.context["run_id"],
            "tracking_uri": self.context["tracking_uri"],
            "workflow": spec.name,
            "spec_yaml": self.loaded.to_yaml(),
            "plots": list(spec.plots),
        }
        if "prior_predictive" in inputs:
            parameters["prior_predictive_path"] = str(inputs["prior_predictive"].file(PRIOR_PREDICTIVE_FILE))
        rendered = render_report(spec.report.template, parameters, self.report_dir)
        return {"notebook": str(rendered.notebook), "html": str(rendered.html)}


def _group_cell(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
    """A vectorised cell's fit: its posterior and values, taken from its group's output."""
    import shutil

    (group,) = inputs.values()
    index = group.values["cells"].index(stage.name)
    shutil.copyfile(group.file(f"posterior-{index}.npz"), staging / POSTERIOR_FILE)
    return {**group.values["fits"][index], "vectorized": True}


def _chain_slice(state: Any, rows: slice) -> Any:
    """The ``params`` and ``momenta`` of some chains of a sampler state, for diagnostics."""
    from types import SimpleNamespace

    momenta = getattr(state, "momenta", None)
    return SimpleNamespace(
        params=state.params[rows], momenta=None if momenta is None else momenta[rows]
    )


def _load_posterior(entry: Entry, device: Any) -> Any:
    """The posterior a fit stage saved, its tensors moved to ``device``."""
    from bayesflow.engines.base import Posterior

    posterior = Posterior.from_arrays(dict(np.load(entry.file(POSTERIOR_FILE))))
    for name in ("samples", "mean", "var", "cov"):
        value = getattr(posterior, name)
        if value is not None:
            setattr(posterior, name, value.to(device))
    return posterior


def _reference_distances(stage: Stage, posterior: Any, reference: Entry) -> dict[str, float]:
    """``reference_mean_error`` and ``reference_variance_error`` against a reference fit."""
    from bayesflow.evaluate.reference import compare_to_reference, posterior_moments

    mean, var = posterior_moments(_load_posterior(reference, "cpu"))
    if not (var > 0).all():
        raise StageError(
            f"{_cell(stage)}: the reference fit ({stage.name} reads evaluate.reference's fit) "
            f"has zero variance in {int((var <= 0).sum())} parameters, so it cannot serve as "
            "a reference; give it more samples or choose a sampler as evaluate.reference"
        )
    return compare_to_reference(posterior, mean, var)


def _sampler_traces(tempering: Any, config: Any, num_data: int, traces: dict[str, list[float]]) -> Any:
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
        ratio = float((momenta.detach() ** 2).mean()) / tempering.per_datum
        traces.setdefault("kinetic_temperature_ratio", []).append(ratio)

    return record


def _starting_point(posterior: Any) -> Any:
    """Where a method that starts ``from`` another begins: its mean (or sample mean)."""
    if posterior.mean is not None:
        return posterior.mean
    return posterior.samples.mean(0)


def _cell(stage: Stage) -> str:
    temperature = "shared" if stage.temperature is None else f"{stage.temperature:g}"
    return f"method {stage.method!r} ({stage.engine}) at temperature {temperature}, seed {stage.seed}"


def describe_error(error: BaseException) -> str:
    """A one-line message for a stage error."""
    if isinstance(error, BayesflowError):
        return str(error)
    return f"{type(error).__name__}: {error}"
