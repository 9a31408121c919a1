"""One fitted posterior with its network: sample, predict, score, or take the network.

:class:`FittedPosterior` rebuilds the flat-parameter problem the way the fit stage does
(``WorkflowContext.problem``) from the run's spec and the cell's sizes, and predicts the way
the evaluate stage does (:func:`bayesflow.evaluate.predictive.posterior_outputs`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bayesflow.families import family_of
from bayesflow.posterior.files import PosteriorError, cell_sizes, read_spec
from bayesflow.spec.prediction import CLOSED_FORM
from bayesflow.stages.evaluate import PREDICTIVE_SEED_OFFSET

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from bayesflow.engines.base import Posterior, Problem
    from bayesflow.likelihoods import Likelihood
    from bayesflow.spec import WorkflowSpec

__all__ = ["EVALUATION_SEED_OFFSET", "FittedPosterior", "NoDensityError", "RegressionPrediction"]

# The evaluate stage draws its samples from a generator seeded this offset + the fit's seed;
# predicting with the same seed repeats its draw exactly.
EVALUATION_SEED_OFFSET = PREDICTIVE_SEED_OFFSET


class NoDensityError(PosteriorError, NotImplementedError):
    """``log_prob`` of a posterior without a density (a sample set or a point estimate)."""


class RegressionPrediction(NamedTuple):
    """The Gaussian-regression posterior predictive: ``mean`` (n,) and total ``variance``
    (n,), the spread of the sampled means plus the observation noise σ²."""

    mean: Tensor
    variance: Tensor


@dataclass
class FittedPosterior:
    """One fitted posterior with its network, ready to sample, predict and score.

    Build it with :func:`load_posterior` (or :meth:`from_files`).

    Attributes:
        posterior: the flat-parameter posterior (``samples``, or ``mean`` with ``var``/``cov``).
        spec: the validated spec of the run that fitted it.
        cell: ``method``, ``engine``, ``temperature``, ``seed`` and the network's sizes.
        param_names: the tensors a flat parameter vector is made of, in order.
        param_shapes: their shapes as ``posterior.npz`` writes them (``"8x64"``).
        device: where the network's parameters live.
        noise_sd: the observation noise sd the fit chose by the evidence (``noise_sd: auto``,
            the run's ``noise_sd_chosen``), which the predictive adds instead of the spec's
            ``likelihood.noise_sd``; None where the fit kept the spec's.
    """

    posterior: Posterior
    spec: WorkflowSpec
    cell: dict[str, Any]
    param_names: tuple[str, ...]
    param_shapes: tuple[str, ...] = ()
    device: str = "cpu"
    base_dir: Path | None = None  # a causal_lm's `model.path` is relative to it
    noise_sd: float | None = None
    _built: tuple[Problem, Likelihood, nn.Module] | None = field(
        default=None, init=False, repr=False
    )

    # ----------------------------------------------------------------- building

    @classmethod
    def from_files(
        cls,
        posterior_file: str | Path,
        spec_file: str | Path,
        cell: dict[str, Any] | str | Path | None = None,
        *,
        base_dir: str | Path | None = None,
        device: str = "cpu",
    ) -> FittedPosterior:
        """Load ``posterior.npz``, the resolved spec and the cell (a mapping or a JSON file).

        Without the sizes in ``cell`` the spec's dataset is loaded (relative data paths
        from ``base_dir``, default the spec's folder) to learn them.
        """
        from bayesflow.engines.base import Posterior

        with np.load(posterior_file) as archive:
            arrays = {name: archive[name] for name in archive.files}
        spec = read_spec(Path(spec_file).read_text(), str(spec_file))
        recorded = json.loads(Path(cell).read_text()) if isinstance(cell, (str, Path)) else cell
        cell = {**(recorded or {})}
        if len(spec.methods) == 1 and not cell.get("method"):
            cell["method"] = next(iter(spec.methods))
        if cell.get("num_features") is None:
            cell.update(cell_sizes(spec, Path(base_dir or Path(spec_file).parent)))
        names = tuple(str(name) for name in arrays.get("param_names", ()))
        shapes = tuple(str(shape) for shape in arrays.get("param_shapes", ()))
        folder = Path(base_dir or Path(spec_file).parent)
        # The fit's chosen noise: posterior.npz's `noise_sd`, else (a posterior saved before
        # the file carried it) the run's `noise_sd_chosen` metric, which `cell` may hold.
        noise = arrays.get("noise_sd", cell.get("noise_sd_chosen"))
        return cls(Posterior.from_arrays(arrays), spec, cell, names, shapes, device, folder,
                   None if noise is None else float(noise))

    def _build(self) -> tuple[Problem, Likelihood, nn.Module]:
        """The network and flat-parameter problem, as the fit stage built them, checked
        against the tensors the posterior holds."""
        if self._built is None:
            built = _build_problem(self.spec, self.cell, self.device, self.base_dir)
            if self.noise_sd is not None:  # the predictive of the noise the fit chose
                from dataclasses import replace

                built = (built[0], replace(built[1], noise_sd=self.noise_sd), built[2])
            problem = built[0]
            tensors = [
                f"{name}: {'x'.join(map(str, shape)) or 'scalar'}"
                for name, shape in zip(problem.param_names, problem.param_shapes)
            ]
            stored = [
                f"{name}: {shape}" for name, shape in zip(self.param_names, self.param_shapes)
            ]
            if stored and tensors != stored:
                raise PosteriorError(
                    f"the spec's model has tensors {tensors} but the posterior holds {stored}; "
                    "load it with the spec and cell.json of the run that fitted it"
                )
            self._built = built
        return self._built

    # --------------------------------------------------------------- describing

    @property
    def method(self) -> str | None:
        """The spec's name of the method (``laplace``), as the run's ``method`` param."""
        return self.cell.get("method")

    @property
    def engine(self) -> str | None:
        """The engine that fitted it (its run's ``engine`` param; without one, a folder
        without ``cell.json``, the spec's engine of the method)."""
        recorded = self.cell.get("engine")
        if recorded is None:
            method = self.spec.methods.get(self.method or "")
            recorded = getattr(method, "engine", None)
        return None if recorded is None else str(recorded)

    @property
    def temperature(self) -> float | None:
        """The posterior temperature T (0 for a fit shared by every temperature, e.g. MAP)."""
        value = self.cell.get("temperature")
        return None if value is None else float(value)

    @property
    def seed(self) -> int | None:
        """The fit's seed."""
        value = self.cell.get("seed")
        return None if value is None else int(value)

    @property
    def kind(self) -> str:
        """``"samples"``, ``"gaussian"``, or ``"point"`` (a mean with zero variance)."""
        if self.posterior.kind == "samples":
            return "samples"
        var = self.posterior.var
        return "point" if var is not None and not bool(var.any()) else "gaussian"

    @property
    def dimension(self) -> int:
        """d, the number of flat parameters."""
        return int(self._stored.shape[-1])

    @property
    def _stored(self) -> Tensor:
        """The samples, or the mean: what fixes d and the dtype."""
        samples, mean = self.posterior.samples, self.posterior.mean
        stored = samples if samples is not None else mean
        assert stored is not None, "a posterior holds samples or a mean"
        return stored

    @property
    def prediction(self) -> str:
        """``sampled`` or a predictive of the linearised network (``linearized``,
        ``closed_form``, ``linearized_mc``): how the evaluate stage predicted (the
        method's ``prediction`` unless ``sampled``, else ``evaluate.prediction``; Gaussians only)."""
        if self.kind != "gaussian":
            return "sampled"
        method = self.spec.methods.get(self.method or "")
        own = str(getattr(method, "prediction", "sampled"))
        if own != "sampled":
            return own
        return str(self.spec.evaluate.prediction)

    def __repr__(self) -> str:
        return (
            f"FittedPosterior(method={self.method!r}, engine={self.engine!r}, "
            f"temperature={self.temperature}, seed={self.seed}, kind={self.kind!r}, "
            f"dimension={self.dimension})"
        )

    # ------------------------------------------------------------------ using

    def sample(self, n: int, seed: int | None = None) -> Tensor:
        """Draw ``n`` flat parameter vectors, shape (n, d).

        A sample set gives ``n`` of its stored rows at random (without replacement while
        ``n`` ≤ the number stored, with replacement beyond); a Gaussian gives
        ``mean + R ε``; a point estimate gives its mean ``n`` times.

        Args:
            n: how many vectors.
            seed: seeds the draw; None draws fresh randomness.
        """
        import torch

        generator = _generator(seed)
        if self.posterior.samples is not None:
            stored = self.posterior.samples
            total = stored.shape[0]
            if n <= total:
                rows = torch.randperm(total, generator=generator)[:n]
            else:
                rows = torch.randint(0, total, (n,), generator=generator)
            return stored[rows]
        return self.posterior.sample(n, generator)

    def predict(self, x: Any, n_samples: int | None = None, seed: int | None = None) -> Any:
        """The posterior predictive at inputs ``x``, as the evaluate stage computes it.

        Args:
            x: (n, features) inputs: a tensor, numpy array or pandas DataFrame.
            n_samples: parameter samples (default the spec's ``evaluate.n_samples``); a
                sample set is subsampled evenly and a point estimate uses its one vector.
            seed: seeds the draw; None uses the evaluate stage's seed, so that the test
                inputs give exactly the predictive behind the run's logged test metrics.

        Returns:
            Classification: (n, C) class probabilities averaged over samples (float64).
            Gaussian regression: a :class:`RegressionPrediction` (mean, total variance).

        Raises:
            PosteriorError: for a likelihood without a predictive (``energy``).
        """
        import torch

        from bayesflow.evaluate.predictive import posterior_outputs
        from bayesflow.llm.dropout import stochastic_passes

        problem, likelihood, _ = self._build()
        if likelihood.task not in ("classification", "regression"):
            raise PosteriorError(
                f"the {likelihood.name!r} likelihood has no predictive (a fixed target, no "
                "data); use sample() or log_prob()"
            )
        if seed is None:
            seed = EVALUATION_SEED_OFFSET + (self.seed or 0)
        count = int(n_samples or self.spec.evaluate.n_samples)
        inputs = self._inputs(x)
        generator = torch.Generator(device=problem.device).manual_seed(int(seed))
        if self.prediction == CLOSED_FORM and bool(self.posterior.var is None or self.posterior.var.any()):
            return _closed_form_prediction(problem, likelihood, self.posterior, inputs)
        # MC dropout's passes: the adapters' dropout on, seeded as the evaluate stage seeds them.
        with stochastic_passes(self.engine, problem.module, int(seed)):
            outputs = posterior_outputs(
                problem, self.posterior, inputs, count, generator, self.prediction
            )
        if likelihood.task == "classification":
            return likelihood.probabilities(outputs).detach().double().mean(dim=0).cpu()
        means = outputs.detach().double().cpu().squeeze(-1)
        variance = means.var(dim=0, unbiased=False) + likelihood.noise_sd**2
        return RegressionPrediction(means.mean(dim=0), variance)

    def log_prob(self, params: Any) -> Tensor:
        """log q(θ) of the Gaussian posterior, for θ of shape (d,) or (n, d).

        Coordinates with zero variance (tensors a ``parameters:`` subset left fixed) are a
        point mass: the density is over the others, −inf where θ leaves the fixed values.

        Raises:
            NoDensityError: for a sample set or a point estimate, which have no density.
        """
        import torch
        from torch.distributions import MultivariateNormal, Normal

        if self.kind != "gaussian":
            raise NoDensityError(
                f"{self.method or 'this fit'} ({self.engine}) is a "
                f"{'sample set' if self.kind == 'samples' else 'point estimate'} and has no "
                "density; use sample() or predict(), or load a Gaussian method's fit "
                "(Laplace, VI, EKF) for log_prob"
            )
        mean = self.posterior.mean
        assert mean is not None
        values = torch.as_tensor(params, dtype=mean.dtype)
        cov, var = self.posterior.cov, self.posterior.var
        spread = cov.diagonal() if cov is not None else var
        assert spread is not None
        free = spread > 0
        if cov is not None:
            try:
                density = MultivariateNormal(mean[free], covariance_matrix=cov[free][:, free])
            except ValueError as exc:
                raise PosteriorError(
                    f"the covariance of {self.method} is not positive definite on its free "
                    "coordinates, so it has no density; use sample()"
                ) from exc
            scores = density.log_prob(values[..., free])
        elif self.posterior.kronecker is not None:  # KFAC Laplace: block by block
            scores = self.posterior.kronecker.log_density(values - mean)
        else:
            scores = Normal(mean[free], spread[free].sqrt()).log_prob(values[..., free]).sum(-1)
        fixed = ~free
        if bool(fixed.any()):
            moved = (values[..., fixed] != mean[fixed]).any(-1)
            scores = scores.masked_fill(moved, -math.inf)
        return scores

    def module(self, params: Any = None) -> nn.Module:
        """The network (in eval mode) with ``params`` loaded: a (d,) flat vector, default
        the posterior mean (the mean of the samples for a sample set)."""
        import torch

        problem, _, _ = self._build()
        if params is None:
            samples = self.posterior.samples
            params = samples.mean(0) if samples is not None else self.posterior.mean
        values = torch.as_tensor(params)
        if values.shape != (self.dimension,):
            raise PosteriorError(
                f"module() takes one flat parameter vector of shape ({self.dimension},), got "
                f"{tuple(values.shape)}; pass one row of sample()"
            )
        return family_of(self.spec).implementation().module_with(problem, values)

    def _inputs(self, x: Any) -> Tensor:
        """``x`` as a tensor: floating inputs in the parameters' dtype, integer ones (token
        ids) as they are."""
        import torch

        values = x.to_numpy() if hasattr(x, "to_numpy") else x
        # A C-ordered copy: a DataFrame's array is read-only (torch warns on those) and may
        # be column-major (a product over it rounds differently from one over a row-major).
        if not isinstance(values, torch.Tensor):
            values = torch.as_tensor(np.array(values, order="C"))
        inputs: Tensor = values
        features = self.cell.get("num_features")
        if inputs.ndim != 2 or (features is not None and inputs.shape[1] != int(features)):
            raise PosteriorError(
                f"predict() takes inputs of shape (n, {features}), got {tuple(inputs.shape)}"
            )
        return inputs.to(self._stored.dtype) if inputs.is_floating_point() else inputs


def _generator(seed: int | None) -> torch.Generator:
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def _build_problem(
    spec: WorkflowSpec, cell: dict[str, Any], device: str, base_dir: Path | None = None
) -> tuple[Problem, Likelihood, nn.Module]:
    """Rebuild the problem as a fit stage does, by the spec's model family: the likelihood's
    outputs from ``num_classes``, the model seeded with the fit's seed (a network with
    random buffers gets the same ones). The prior is left out: no use here needs it."""
    import torch

    from bayesflow.families import family_of
    from bayesflow.families.base import Sizes
    from bayesflow.priors import none

    classes, features = cell.get("num_classes"), cell.get("num_features")
    sizes = Sizes(None if features is None else int(features), None if classes is None else int(classes),
                  int(cell.get("seed") or 0))
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state as it was
        problem, likelihood = family_of(spec).implementation().problem(spec, sizes, none(), device, base_dir)
    assert problem.module is not None
    return problem, likelihood, problem.module


def _closed_form_prediction(problem: Any, likelihood: Any, posterior: Any, inputs: Any) -> Any:
    """``prediction: closed_form``: the probit probabilities (classification), or the
    linearised network's N(f_mean, f_var + σ²) (Gaussian regression), float64."""
    from bayesflow.engines.linearized import functional_moments, probit_probabilities

    moments = functional_moments(problem, posterior, inputs)
    if likelihood.task == "classification":
        return probit_probabilities(moments, likelihood).detach().cpu()
    mean = moments.mean.detach().double().cpu().squeeze(-1)
    variance = moments.variance.detach().double().cpu()[:, 0, 0] + likelihood.noise_sd**2
    return RegressionPrediction(mean, variance)
