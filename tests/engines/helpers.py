"""Helpers of the engine tests: linear regression, a 1-D Gaussian, small configs.

Bayesian linear regression ``y = Xw + N(0, σ²)`` with prior ``w ~ N(0, σ₀² I)`` has the
tempered posterior ``N(m, Λ⁻¹)``: with the whole posterior tempered
``Λ = (I/σ₀² + XᵀX/σ²) / T``; with only the likelihood tempered
``Λ = I/σ₀² + XᵀX/(σ² T)``. Point estimates find ``m``; diagonal (mean-field) methods
have variance ``1 / diag(Λ)``; dense methods and samplers have covariance ``Λ⁻¹``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Engine, Posterior, Problem
from bayesflow.engines.fit import fit
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import ChainTempering, Tempering

NUM_DATA, NOISE_SD, PRIOR_VARIANCE = 200, 0.5, 2.0
COLD = 0.1
CASES = [(1.0, "posterior"), (COLD, "posterior"), (1.0, "likelihood"), (COLD, "likelihood")]
WARM_AND_COLD = [(1.0, "posterior"), (COLD, "likelihood")]

Regression = tuple[Problem, Tensor, Tensor]

# Settings of the long closed-form fits, shared by the table of test_closed_form and the
# modules that check the same methods' other properties (√T, kinetic temperature, T = 0).
VI_CONFIG: dict[str, Any] = {
    "epochs": 400,
    "n_samples": 8,
    "init_log_sd": -3.5,
    "optimizer": {"lr": 0.05, "schedule": {"kind": "cosine", "final_fraction": 0.01}},
}
SGHMC_CONFIG: dict[str, Any] = {"lr": 0.05, "alpha": 2.0, "epochs": 1000, "burn_in": 200, "chains": 64}
# Step sizes well inside each scheme's stable range for the regression's per-datum
# precision (about 1): the step-size bias of the variance is ~2.5% for SGLD
# (1/(1 − ε/2)), ~1.3% for SGHMC-type schemes and smaller for BAOA (measured), far
# inside the tolerances of the closed-form table, which are set by the Monte Carlo error.
SAMPLER_CONFIGS: dict[str, dict[str, Any]] = {
    "sgld": {"lr": 0.05, "epochs": 500, "burn_in": 150, "chains": 128},
    "sgnht": {"lr": 0.05, "alpha": 2.0, "epochs": 500, "burn_in": 150, "chains": 128},
    "baoa": {"lr": 0.1, "alpha": 2.0, "epochs": 500, "burn_in": 150, "chains": 128},
}


class Exact(NamedTuple):
    """The exact tempered posterior N(mean, inverse(precision))."""

    mean: Tensor
    precision: Tensor

    @property
    def mean_field_var(self) -> Tensor:
        """``1 / diag(Λ)``: the variance of the diagonal Laplace and mean-field VI."""
        return 1 / self.precision.diagonal()

    @property
    def cov(self) -> Tensor:
        """``Λ⁻¹``: the posterior covariance."""
        return torch.linalg.inv(self.precision)

    @property
    def marginal_var(self) -> Tensor:
        """``diag(Λ⁻¹)``: the true marginal variances."""
        return self.cov.diagonal()


@lru_cache(maxsize=1)
def make_regression() -> Regression:
    """A float64 linear regression problem, its inputs (N, 3) and targets (N,)."""
    generator = torch.Generator().manual_seed(0)
    # Inputs of sd 0.5 make the per-datum precision XᵀX/(Nσ²) about the identity.
    inputs = 0.5 * torch.randn(NUM_DATA, 3, generator=generator, dtype=torch.float64)
    weights = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)
    targets = inputs @ weights + NOISE_SD * torch.randn(
        NUM_DATA, generator=generator, dtype=torch.float64
    )
    model = linear(3, 1, bias=False).double()
    problem = build_problem(model, gaussian(NOISE_SD), diag_normal(PRIOR_VARIANCE), NUM_DATA)
    return problem, inputs, targets


def exact(inputs: Tensor, targets: Tensor, temperature: float, convention: str) -> Exact:
    """The closed-form tempered posterior of the regression."""
    prior = torch.eye(3, dtype=inputs.dtype) / PRIOR_VARIANCE
    gram, moment = inputs.T @ inputs / NOISE_SD**2, inputs.T @ targets / NOISE_SD**2
    if convention == "posterior":
        precision = (prior + gram) / temperature
        return Exact(torch.linalg.solve(prior + gram, moment), precision)
    precision = prior + gram / temperature
    return Exact(torch.linalg.solve(precision, moment / temperature), precision)


def run(
    name: str,
    regression: Regression,
    temperature: float,
    convention: str,
    params: Tensor | None = None,
    seed: int = 0,
    **config: Any,
) -> Posterior:
    """Fit engine ``name`` on the regression, full batch, from ``params`` (default zeros)."""
    problem, inputs, targets = regression
    values = {"engine": name, **config}
    if "batch_size" in METHODS.get(name).spec.model_fields:
        values.setdefault("batch_size", None)
    spec = METHODS.get(name).spec.model_validate(values)
    tempering = Tempering(temperature, NUM_DATA, convention)  # type: ignore[arg-type]
    engine = METHODS.get(name).builder()(problem, tempering, spec)
    start = torch.zeros(problem.dimension, dtype=torch.float64) if params is None else params
    return fit(engine, start, inputs, targets, torch.Generator().manual_seed(seed)).posterior


CACHE: dict[str, Posterior] = {}


def run_cached(name: str, temperature: float, convention: str, **config: Any) -> Posterior:
    """:func:`run` from zeros on the shared regression, memoised (tests share long runs)."""
    key = repr((name, temperature, convention, sorted(config.items())))
    if key not in CACHE:
        CACHE[key] = run(name, make_regression(), temperature, convention, **config)
    return CACHE[key]


def standard_gaussian() -> Problem:
    """The 1-D target log p(θ) = −θ²/2 with N = 1 and no data term."""
    return Problem(
        forward=lambda params, inputs: torch.zeros(inputs.shape[0], 1, dtype=params.dtype),
        log_likelihood=lambda outputs, targets: torch.zeros(outputs.shape[0]),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], 1, 1),
        log_prior=lambda params: -0.5 * (params**2).sum(-1),
        prior_precision=torch.ones(1),
        num_data=1,
        dimension=1,
        param_names=("theta",),
        param_shapes=((1,),),
        init_params=lambda generator: torch.randn(1, generator=generator),
    )


def sample_standard_gaussian(name: str, temperature: float, **config: Any) -> Tensor:
    """Samples of engine ``name`` on the 1-D standard Gaussian at ``temperature``."""
    problem = standard_gaussian()
    spec = METHODS.get(name).spec.model_validate({"engine": name, **config})
    engine = METHODS.get(name).builder()(problem, Tempering(temperature, 1), spec)
    batch = (torch.zeros(1, 1), torch.zeros(1))
    samples = fit(
        engine, torch.zeros(1), *batch, torch.Generator().manual_seed(0)
    ).posterior.samples
    assert samples is not None
    return samples


# The conformance table: a few cheap steps of every method on the conformance problem's 24
# points in minibatches of 8. A method joins the suites parametrized over every registered
# method (test_conformance, test_traits, test_device) by adding its row here.
SAMPLER = {"epochs": 2, "batch_size": 8, "chains": 3, "burn_in": 1, "thin": 2}
SMALL_CONFIGS: dict[str, dict[str, Any]] = {
    "map": {"epochs": 2, "batch_size": 8},
    "mle": {"epochs": 2, "batch_size": 8},
    "deep_ensemble": {"epochs": 2, "batch_size": 8, "members": 3},
    "laplace_diag_ggn": {"batch_size": 8},
    "laplace_diag_fisher": {"batch_size": 8},
    "laplace_dense_fisher": {"batch_size": 8},
    "laplace_dense_ggn": {"batch_size": 8},
    "laplace_dense_hessian": {"batch_size": 8},
    "laplace_kfac_ggn": {"batch_size": 8},
    "laplace_kfac_fisher": {"batch_size": 8},
    "vi_diag": {"epochs": 2, "batch_size": 8, "n_samples": 2},
    "vi_dense": {"epochs": 2, "batch_size": 8, "n_samples": 2},
    "ekf_diag_fisher": {"epochs": 2, "batch_size": 8},
    "ekf_dense_fisher": {"epochs": 2, "batch_size": 8, "fisher": "empirical"},
    "sgld": {**SAMPLER, "schedule": {"kind": "decaying", "decay_steps": 2}},
    "sghmc": SAMPLER,
    "sgnht": {**SAMPLER, "schedule": {"kind": "cyclical", "cycles": 2, "exploration": 0.25}},
    "baoa": {**SAMPLER, "keep": "last"},
    "sgmcmc_wenzel": {**SAMPLER, "schedule": {"kind": "cyclical", "cycles": 2}},
    "nuts": {"warmup": 4, "num_samples": 3, "chains": 2},
    "conjugate_linear": {},
    "base": {},
    "ivon": {"epochs": 2, "batch_size": 8, "mc_samples": 2, "beta2": 0.99},
    "swag": {"epochs": 2, "batch_size": 8, "burn_in": 0, "collect_every": 1, "rank": 2,
             "members": 2, "samples": 4},
    "mc_dropout": {"epochs": 2, "batch_size": 8, "passes": 3},
}


def make_config(name: str, **overrides: Any) -> Any:
    """The small spec model of engine ``name``."""
    values = {"engine": name, **SMALL_CONFIGS[name], **overrides}
    return METHODS.get(name).spec.model_validate(values)


# The conformance problem: a tiny three-class MLP on 24 points (fixtures in conftest.py).
CONFORMANCE_DATA = 24


def conformance_problem(prior_variance: float = 1.0) -> Problem:
    """A tiny three-class MLP problem with a diagonal normal prior."""
    model = mlp(2, 3, hidden=[5], activation="tanh")
    return build_problem(model, categorical(), diag_normal(prior_variance), CONFORMANCE_DATA)


def build_engine(
    name: str,
    problem: Problem,
    temperature: float | Tempering | ChainTempering = 1.0,
    convention: str = "posterior",
    **overrides: Any,
) -> Engine:
    """Build engine ``name`` from its small config at ``temperature`` (or a tempering)."""
    tempering = temperature
    if isinstance(temperature, float | int):
        tempering = Tempering(temperature, problem.num_data, convention)  # type: ignore[arg-type]
    return METHODS.get(name).builder()(problem, tempering, make_config(name, **overrides))


def starting_point(name: str, problem: Problem, mode: Tensor, generator: torch.Generator) -> Tensor:
    """Where engine ``name`` starts: the mode when its traits say it needs one (as
    ``from: map`` gives it), else the model's initialisation."""
    return mode if METHODS.get(name).traits.needs_mode else problem.init_params(generator)


def run_small(
    name: str,
    problem: Problem,
    data: tuple[Tensor, Tensor],
    mode: Tensor,
    seed: int,
    temperature: float = 1.0,
    convention: str = "posterior",
) -> Posterior:
    """Fit engine ``name`` from its small config and starting point under ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    params = starting_point(name, problem, mode, generator)
    engine = build_engine(name, problem, temperature, convention)
    return fit(engine, params, *data, generator).posterior


def tensors(posterior: Posterior) -> dict[str, Tensor]:
    """The tensors a posterior holds, by field name."""
    fields = ("samples", "mean", "var", "cov")
    return {
        name: getattr(posterior, name) for name in fields if getattr(posterior, name) is not None
    }
