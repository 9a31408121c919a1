"""The Laplace evidence and the evidence-chosen prior, against laplace-torch and closed forms."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from torch import Tensor, nn

from bayesflow.engines.base import Problem
from bayesflow.engines.curvature import (
    dense_fisher,
    dense_ggn,
    dense_hessian,
    diagonal_fisher,
    diagonal_ggn,
)
from bayesflow.engines.evidence import (
    ModeFit,
    dense_log_det,
    diagonal_log_det,
    log_det_of,
    log_evidence,
    mode_fit,
    noise_exponent,
    normal_log_prior,
)
from bayesflow.engines.evidence_prior import choose_prior, maximise_evidence
from bayesflow.errors import StageError
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods.laplace import LaplaceState
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem

laplace = pytest.importorskip("laplace")

NOISE = 0.7


def network(task: str) -> tuple[nn.Module, Tensor, Tensor]:
    """A 3-5-k tanh MLP (float64) and 60 points: three classes, or a noisy sine."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(60, 3, generator=generator, dtype=torch.float64)
    if task == "classification":
        targets = torch.randint(0, 3, (60,), generator=generator)
    else:
        noise = 0.1 * torch.randn(60, generator=generator, dtype=torch.float64)
        targets = torch.sin(inputs.sum(1)) + noise
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3 if task == "classification" else 1))
    return model.double(), inputs, targets


def bayesflow_problem(model: nn.Module, task: str, variance: float = 0.5, noise: float = NOISE) -> Problem:
    likelihood = categorical() if task == "classification" else gaussian(noise)
    return build_problem(model, likelihood, diag_normal(variance), 60)


def flat(model: nn.Module) -> Tensor:
    return torch.cat([parameter.detach().reshape(-1) for parameter in model.parameters()])


def trained(problem: Problem, params: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
    """The MAP of ``problem`` from ``params`` (full-batch L-BFGS), where the Hessian is PD."""
    values = params.clone().requires_grad_(True)
    optimiser = torch.optim.LBFGS([values], max_iter=500, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        optimiser.zero_grad()
        loss = -problem.log_posterior(values, (inputs, targets)) * problem.num_data
        loss.backward()
        return loss

    optimiser.step(closure)
    return values.detach()


def reference(model: nn.Module, task: str, structure: str, inputs: Tensor, targets: Tensor,
              precision: float) -> object:
    """laplace-torch's Laplace of ``model`` (all weights, GGN) fitted on the data.

    Under torch's default float32 it builds some tensors (an identity, the output Hessian's
    pieces) in float32, which moves its GGN by 2e-8 relative: it runs in float64 here.
    """
    from torch.utils.data import DataLoader, TensorDataset

    labels = targets if task == "classification" else targets.unsqueeze(-1)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fitted = laplace.Laplace(
            model, task, subset_of_weights="all", hessian_structure=structure,
            prior_precision=precision, sigma_noise=NOISE if task == "regression" else 1.0,
        )
        fitted.fit(DataLoader(TensorDataset(inputs, labels), batch_size=20))
    finally:
        torch.set_default_dtype(default)
    return fitted


STRUCTURES: dict[str, tuple[Callable[..., Tensor], Callable[[Tensor], Callable[[Tensor], Tensor]]]] = {
    "diag": (diagonal_ggn, diagonal_log_det),
    "full": (dense_ggn, dense_log_det),
}


class Case(NamedTuple):
    """One network and its data, bound to a bayesflow problem, with its GGN."""

    model: nn.Module
    inputs: Tensor
    targets: Tensor
    problem: Problem
    state: LaplaceState
    mode: ModeFit

    @property
    def params(self) -> Tensor:
        return self.state.params


def case(task: str, structure: str, variance: float = 0.5) -> Case:
    """:func:`network` at its initial weights with the ``structure`` GGN there."""
    model, inputs, targets = network(task)
    problem = bayesflow_problem(model, task, variance)
    params = flat(model)
    curvature = STRUCTURES[structure][0](problem, params, (inputs, targets))
    return Case(model, inputs, targets, problem, LaplaceState(params, curvature),
                mode_fit(problem, params, inputs, targets, batch_size=7))


@pytest.mark.parametrize("structure", ["diag", "full"])
@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("precision", [0.3, 2.0])
def test_log_evidence_equals_laplace_torch(task: str, structure: str, precision: float) -> None:
    """log p(D|θ*) + log p(θ*) + (d/2) log 2π − ½ log det Λ is laplace-torch's marginal likelihood."""
    found = case(task, structure, 1.0 / precision)
    problem, params = found.problem, found.params
    ones = torch.ones_like(params)
    ours = log_evidence(found.mode.log_likelihood, normal_log_prior(params, precision * ones),
                        params.numel(), STRUCTURES[structure][1](found.state.curvature)(precision * ones))
    theirs = reference(found.model, task, structure, found.inputs, found.targets, precision).log_marginal_likelihood()  # type: ignore[attr-defined]
    # float64 throughout; the two sum the same ~60 examples' terms in other orders.
    assert float(ours) == pytest.approx(float(theirs), rel=1e-10, abs=1e-10)
    # The log prior is the bound prior's own density.
    assert float(normal_log_prior(params, precision * ones)) == pytest.approx(float(problem.log_prior(params)), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["diag", "full"])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_chosen_prior_equals_laplace_torch(task: str, structure: str) -> None:
    """The evidence-maximising prior precision is laplace-torch's marglik optimum."""
    found = case(task, structure)
    choice = maximise_evidence(found.params, log_det_of(found.state), found.mode, 2.0)
    theirs = reference(found.model, task, structure, found.inputs, found.targets, 2.0)
    # laplace-torch's Adam (lr 0.1) on log α, run long enough to settle (its default is 100 steps).
    theirs.optimize_prior_precision(method="marglik", n_steps=1500, lr=0.1, init_prior_prec=2.0)  # type: ignore[attr-defined]
    assert choice.prior_precision[0] == pytest.approx(float(theirs.prior_precision), rel=1e-5)  # type: ignore[attr-defined]
    assert choice.log_evidence == pytest.approx(float(theirs.log_marginal_likelihood()), rel=1e-9)  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["diag", "full"])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_chosen_prior_per_tensor_equals_laplace_torch_layerwise(task: str, structure: str) -> None:
    """One precision per parameter tensor is laplace-torch's `prior_structure='layerwise'`."""
    found = case(task, structure)
    _, _, metrics = choose_prior(found.problem, found.state, found.mode, curvature_name=f"{structure}_ggn",
                                 prior_auto=True, per_tensor=True)
    theirs = reference(found.model, task, structure, found.inputs, found.targets, 2.0)
    theirs.optimize_prior_precision(  # type: ignore[attr-defined]
        method="marglik", n_steps=3000, lr=0.05, init_prior_prec=2.0, prior_structure="layerwise"
    )
    ours = [1 / metrics[f"prior_variance_chosen/{name}"] for name in found.problem.param_names]
    assert len(ours) == 4 and "prior_variance_chosen" not in metrics
    np.testing.assert_allclose(ours, theirs.prior_precision.detach().numpy(), rtol=1e-4)  # type: ignore[attr-defined]
    assert metrics["log_evidence"] == pytest.approx(float(theirs.log_marginal_likelihood()), rel=1e-9)  # type: ignore[attr-defined]


@pytest.mark.parametrize("structure", ["diag", "full"])
def test_chosen_prior_and_noise_maximise_laplace_torch_evidence(structure: str) -> None:
    """For regression, (α, σ) maximise laplace-torch's marginal likelihood in both."""
    found = case("regression", structure)
    choice = maximise_evidence(found.params, log_det_of(found.state), found.mode, 2.0, noise_sd=NOISE)
    theirs = reference(found.model, "regression", structure, found.inputs, found.targets, 2.0)
    at_choice = theirs.log_marginal_likelihood(  # type: ignore[attr-defined]
        torch.tensor(choice.prior_precision[0], dtype=torch.float64), torch.tensor(choice.noise_sd, dtype=torch.float64)
    )
    assert choice.log_evidence == pytest.approx(float(at_choice), rel=1e-10)
    # A maximum of laplace-torch's function: its gradient in (log α, log σ) vanishes.
    variables = torch.tensor([math.log(choice.prior_precision[0]), math.log(choice.noise_sd)],  # type: ignore[arg-type]
                             dtype=torch.float64, requires_grad=True)
    theirs.log_marginal_likelihood(variables[0].exp(), variables[1].exp()).backward()  # type: ignore[attr-defined]
    assert variables.grad is not None
    assert float(variables.grad.abs().max()) < 1e-5
    assert choice.noise_sd != pytest.approx(NOISE, rel=1e-3)  # it moved


def test_chosen_prior_is_mackays_fixed_point() -> None:
    """α = γ / ‖θ*‖², γ = Σ μⱼ/(μⱼ + α) over the curvature's eigenvalues (MacKay, 1992)."""
    found = case("classification", "full")
    params, curvature = found.params, found.state.curvature
    choice = maximise_evidence(params, dense_log_det(curvature), found.mode, 0.1)
    eigenvalues = torch.linalg.eigvalsh(curvature)
    alpha = choice.prior_precision[0]
    # The 0-d precision (eigenvalues) and the (d,) one (Cholesky) give one log-determinant.
    by_eigenvalues = dense_log_det(curvature)(torch.tensor(alpha, dtype=torch.float64))
    by_cholesky = dense_log_det(curvature)(torch.full_like(params, alpha))
    assert float(by_eigenvalues) == pytest.approx(float(by_cholesky), rel=1e-12, abs=1e-12)
    gamma = float((eigenvalues / (eigenvalues + alpha)).sum())
    assert alpha == pytest.approx(gamma / float(params @ params), rel=1e-6)


# ------------------------------------------------------- Bayesian linear regression


def linear_data() -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(40, 4, generator=generator, dtype=torch.float64)
    weights = torch.tensor([1.0, -0.5, 0.0, 2.0], dtype=torch.float64)
    targets = inputs @ weights + 0.3 + 0.8 * torch.randn(40, generator=generator, dtype=torch.float64)
    return inputs, targets


def linear_problem(variance: float, noise: float) -> tuple[Problem, Tensor, Tensor, Tensor]:
    """A linear model with intercept at its exact mode (the normal equations)."""
    inputs, targets = linear_data()
    problem = build_problem(nn.Linear(4, 1).double(), gaussian(noise), diag_normal(variance), 40)
    design = torch.cat([inputs, torch.ones(40, 1, dtype=torch.float64)], 1)  # flat order: weight, bias
    precision = design.T @ design / noise**2 + torch.eye(5, dtype=torch.float64) / variance
    mode = torch.linalg.solve(precision, design.T @ targets / noise**2)
    return problem, mode, inputs, targets


def exact_log_evidence(variance: float, noise: float) -> float:
    """log N(y; 0, σ²I + v XXᵀ) with X the design with its intercept column (SciPy)."""
    inputs, targets = linear_data()
    design = np.concatenate([inputs.numpy(), np.ones((40, 1))], 1)
    covariance = noise**2 * np.eye(40) + variance * design @ design.T
    return float(multivariate_normal.logpdf(targets.numpy(), np.zeros(40), covariance))


@pytest.mark.parametrize("variance", [0.05, 1.0, 20.0])
@pytest.mark.parametrize("structure", ["diag", "full"])
def test_laplace_evidence_is_exact_for_linear_regression(variance: float, structure: str) -> None:
    """The dense GGN evidence is the Gaussian marginal likelihood; the diagonal one is not."""
    problem, mode, inputs, targets = linear_problem(variance, 0.8)
    curvature_of, _ = STRUCTURES[structure]
    state = LaplaceState(mode, curvature_of(problem, mode, (inputs, targets)))
    _, _, metrics = choose_prior(problem, state, mode_fit(problem, mode, inputs, targets),
                                 curvature_name=f"{structure}_ggn")
    exact = exact_log_evidence(variance, 0.8)
    if structure == "full":
        assert metrics["log_evidence"] == pytest.approx(exact, rel=1e-11, abs=1e-11)
    else:  # a diagonal precision drops the correlations: Hadamard, det(diag Λ) ≥ det Λ
        assert metrics["log_evidence"] < exact - 1e-3


@pytest.mark.slow
def test_chosen_prior_and_noise_match_a_grid_search_of_the_exact_evidence() -> None:
    """On linear regression the chosen (v, σ) maximise the exact evidence (a SciPy grid).

    The Laplace posterior keeps the mode found under the spec's prior, so the exact
    evidence and the post-hoc one differ away from it; at the mode of the chosen prior
    the two agree, which is the fixed point checked here after refitting the mode.
    """
    variance, noise = 1.0, 0.8
    for _ in range(60):  # refit the mode under the chosen prior until it stops moving
        problem, mode, inputs, targets = linear_problem(variance, noise)
        state = LaplaceState(mode, dense_ggn(problem, mode, (inputs, targets)))
        _, _, metrics = choose_prior(problem, state, mode_fit(problem, mode, inputs, targets),
                                     curvature_name="dense_ggn", prior_auto=True, noise_sd=noise)
        moved = abs(math.log(metrics["prior_variance_chosen"] / variance)) + abs(math.log(metrics["noise_sd_chosen"] / noise))
        variance, noise = metrics["prior_variance_chosen"], metrics["noise_sd_chosen"]
        if moved < 1e-10:
            break
    assert moved < 1e-10
    log_variances = np.linspace(math.log(variance) - 0.4, math.log(variance) + 0.4, 81)
    log_noises = np.linspace(math.log(noise) - 0.2, math.log(noise) + 0.2, 81)
    grid = np.array([[exact_log_evidence(math.exp(a), math.exp(b)) for b in log_noises] for a in log_variances])
    row, column = np.unravel_index(grid.argmax(), grid.shape)
    assert math.log(variance) == pytest.approx(log_variances[row], abs=log_variances[1] - log_variances[0])
    assert math.log(noise) == pytest.approx(log_noises[column], abs=log_noises[1] - log_noises[0])
    assert metrics["log_evidence"] == pytest.approx(exact_log_evidence(variance, noise), rel=1e-10)
    assert metrics["log_evidence"] >= grid.max() - 1e-9


def test_chosen_prior_matches_a_grid_search_of_the_laplace_evidence() -> None:
    """At a fixed mode, the chosen variance is the best of a fine grid of the same evidence."""
    found = case("classification", "diag")
    params, state, fitted = found.params, found.state, found.mode
    _, _, metrics = choose_prior(found.problem, state, fitted, curvature_name="diag_ggn", prior_auto=True)
    grid = np.exp(np.linspace(-8, 8, 4001))
    values = []
    for variance in grid:
        precision = torch.full_like(params, 1.0 / variance)
        values.append(float(log_evidence(fitted.log_likelihood, normal_log_prior(params, precision),
                                         params.numel(), log_det_of(state)(precision))))
    best = int(np.argmax(values))
    assert math.log(metrics["prior_variance_chosen"]) == pytest.approx(math.log(grid[best]), abs=0.004)
    assert metrics["log_evidence"] >= max(values) - 1e-9
    assert metrics["log_evidence_spec_prior"] <= metrics["log_evidence"]


CURVATURES = [("diag_ggn", diagonal_ggn), ("dense_ggn", dense_ggn), ("dense_hessian", dense_hessian),
              ("diag_fisher", diagonal_fisher), ("dense_fisher", dense_fisher)]


@pytest.mark.parametrize(("name", "curvature_of"), CURVATURES)
def test_curvature_scales_with_the_noise_as_stated(name: str, curvature_of: Callable[..., Tensor]) -> None:
    """C(σ) = C(σ₀)·(σ₀/σ)^k with k = noise_exponent(name): 2, or 4 for an empirical Fisher."""
    model, inputs, targets = network("regression")
    params = flat(model)
    before = curvature_of(bayesflow_problem(model, "regression", noise=NOISE), params, (inputs, targets))
    after = curvature_of(bayesflow_problem(model, "regression", noise=1.3), params, (inputs, targets))
    torch.testing.assert_close(after, before * (NOISE / 1.3) ** noise_exponent(name), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize(("name", "curvature_of"), [item for item in CURVATURES if item[0] != "dense_hessian"])
def test_curvature_rescaled_to_the_chosen_noise(name: str, curvature_of: Callable[..., Tensor]) -> None:
    """The chosen noise's curvature is the curvature computed afresh at that noise."""
    model, inputs, targets = network("regression")
    problem = bayesflow_problem(model, "regression")
    params = trained(problem, flat(model), inputs, targets)
    state = LaplaceState(params, curvature_of(problem, params, (inputs, targets)))
    chosen, rescaled, metrics = choose_prior(problem, state, mode_fit(problem, params, inputs, targets),
                                             curvature_name=name, prior_auto=True, noise_sd=NOISE)
    afresh = curvature_of(chosen, params, (inputs, targets))
    torch.testing.assert_close(rescaled.curvature, afresh, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(chosen.prior_precision, torch.full_like(params, 1 / metrics["prior_variance_chosen"]))
    # The evidence is the one of the rescaled curvature under the chosen prior.
    direct = log_evidence(mode_fit(chosen, params, inputs, targets).log_likelihood, chosen.log_prior(params),
                          params.numel(), log_det_of(rescaled)(chosen.prior_precision))
    assert metrics["log_evidence"] == pytest.approx(float(direct), rel=1e-10)


def test_an_indefinite_hessian_has_no_evidence_maximum() -> None:
    """A Hessian with a negative eigenvalue is refused: the evidence is unbounded there."""
    model, inputs, targets = network("regression")
    problem = bayesflow_problem(model, "regression")
    params = trained(problem, flat(model), inputs, targets)
    hessian = dense_hessian(problem, params, (inputs, targets))
    assert float(torch.linalg.eigvalsh(hessian).min()) < 0  # this network's is indefinite
    state = LaplaceState(params, hessian)
    fitted = mode_fit(problem, params, inputs, targets)
    _, _, metrics = choose_prior(problem, state, fitted, curvature_name="dense_hessian")
    assert math.isfinite(metrics["log_evidence"])  # at the spec's prior it is defined
    with pytest.raises(StageError, match="the exact Hessian is indefinite at this mode.*choose the prior with laplace_dense_ggn"):
        choose_prior(problem, state, fitted, curvature_name="dense_hessian", prior_auto=True)


def sinusoid_case(dtype: torch.dtype) -> tuple[Problem, LaplaceState, ModeFit]:
    """laplace-torch's regression example (a 1-50-1 tanh MLP, 151 weights, on 150 noisy
    sine points) at its initial weights, with its dense GGN in ``dtype``: rank ≤ 150 < 151."""
    generator = torch.Generator().manual_seed(711)
    inputs = torch.rand(150, 1, generator=generator) * 8
    targets = (torch.sin(inputs) + 0.3 * torch.randn(150, 1, generator=generator)).squeeze(-1)
    inputs, targets = inputs.to(dtype), targets.to(dtype)
    torch.manual_seed(711)
    model = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 1)).to(dtype)
    problem = build_problem(model, gaussian(1.0), diag_normal(1.0), 150)
    params = flat(model)
    curvature = dense_ggn(problem, params, (inputs, targets))
    return problem, LaplaceState(params, curvature), mode_fit(problem, params, inputs, targets)


def test_a_rank_deficient_float32_ggn_chooses_the_prior_its_float64_twin_chooses() -> None:
    """laplace-torch's sinusoid example: the float32 GGN's rounding gives it negative
    eigenvalues, read as zero, so the evidence-chosen prior and noise are the float64 ones
    (to float32's accuracy)."""
    problem, state, fitted = sinusoid_case(torch.float32)
    smallest = float(torch.linalg.eigvalsh(state.curvature.double()).min())
    assert smallest < -151 * torch.finfo(torch.float64).eps * float(state.curvature.abs().max())
    metrics = choose_prior(problem, state, fitted, curvature_name="dense_ggn", prior_auto=True, noise_sd=1.0)[2]
    twin = choose_prior(*sinusoid_case(torch.float64), curvature_name="dense_ggn", prior_auto=True, noise_sd=1.0)[2]
    assert metrics["prior_variance_chosen"] == pytest.approx(twin["prior_variance_chosen"], rel=1e-2)
    assert metrics["noise_sd_chosen"] == pytest.approx(twin["noise_sd_chosen"], rel=1e-3)
    assert metrics["log_evidence"] == pytest.approx(twin["log_evidence"], abs=0.05)


def test_an_indefinite_ggn_is_blamed_on_its_computation_not_on_a_hessian() -> None:
    """A GGN with an eigenvalue far below its rounding is refused with the eigenvalue and
    a cause that fits a GGN (which is semi-definite in exact arithmetic)."""
    problem, state, fitted = sinusoid_case(torch.float32)
    broken = state._replace(curvature=state.curvature - 10.0 * torch.eye(151))
    with pytest.raises(StageError) as caught:
        choose_prior(problem, broken, fitted, curvature_name="dense_ggn", prior_auto=True)
    message = str(caught.value)
    assert "dense_ggn curvature (151 parameters, computed in float32) has the eigenvalue -10" in message
    assert "a GGN is positive semi-definite in exact arithmetic" in message
    assert "Hessian is indefinite" not in message and "choose the prior with laplace_dense_ggn" not in message
