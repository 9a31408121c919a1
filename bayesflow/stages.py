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
from bayesflow.spec.load import LoadedSpec

__all__ = ["POSTERIOR_FILE", "StageRunner", "fit_parameters"]

POSTERIOR_FILE = "posterior.npz"
EVALUATION_FILE = "evaluation.npz"
PRIOR_PREDICTIVE_FILE = "prior_predictive.npz"


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
            "evaluate": self.evaluate,
            "plot": self.plot,
            "report": self.report,
            "prior_predictive": self.prior_predictive,
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
        if stage.engine == "mle":
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
        """
        import torch

        from bayesflow.engines import ENGINES
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
        engine = ENGINES.get(stage.engine or "")(problem, tempering, config)
        x_train, y_train = self._tensors(self.dataset.x_train, self.dataset.y_train, problem.device)
        began = time.perf_counter()
        try:
            result = fit(engine, params, x_train, y_train, generator)
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
        np.savez(staging / POSTERIOR_FILE, **posterior.to_arrays(full_problem))
        return {
            "fit_seconds": seconds,
            "steps": int(result.steps),
            "history": [float(value) for value in result.history],
            "diagnostics": diagnostics,
        }

    def evaluate(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        """Evaluate a fitted posterior on the test set."""
        import torch

        from bayesflow.engines.base import Posterior
        from bayesflow.evaluate import evaluate_full

        (fitted,) = inputs.values()
        problem, likelihood, _ = self._problem(stage)
        arrays = dict(np.load(fitted.file(POSTERIOR_FILE)))
        posterior = Posterior.from_arrays(arrays)
        for name in ("samples", "mean", "var", "cov"):
            value = getattr(posterior, name)
            if value is not None:
                setattr(posterior, name, value.to(problem.device))
        generator = torch.Generator(device=problem.device).manual_seed(10_000 + int(stage.seed or 0))
        x_test, y_test = self._tensors(self.dataset.x_test, self.dataset.y_test, problem.device)
        settings = self.loaded.spec.evaluate
        x_ood = None
        if self.dataset.x_ood is not None:
            x_ood = torch.as_tensor(self.dataset.x_ood, device=problem.device)
        result = evaluate_full(
            problem, likelihood, posterior, x_test, y_test,
            n_samples=settings.n_samples, generator=generator, ece_bins=settings.ece_bins,
            ece_binning=settings.ece_binning, coverage_levels=settings.coverage_levels,
            x_ood=x_ood, prediction=settings.prediction if posterior.kind == "gaussian" else "sampled",
        )
        bad = [name for name, value in result.metrics.items() if not np.isfinite(value)]
        if bad:
            raise StageError(f"{_cell(stage)}: metrics {bad} are not finite; the fit may have diverged")
        np.savez_compressed(staging / EVALUATION_FILE, **result.arrays)
        return {
            "metrics": {name: float(value) for name, value in result.metrics.items()},
            "conventions": dict(result.conventions),
        }

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
        np.savez_compressed(staging / PRIOR_PREDICTIVE_FILE, **check.arrays())
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
