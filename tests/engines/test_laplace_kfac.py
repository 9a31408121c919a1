"""The KFAC Laplace engines against laplace-torch and closed forms.

laplace-torch 0.3 (``hessian_structure="kron"``, the curvlinops backends ``CurvlinopsGGN``
(exact, ``FisherType.TYPE2``) and ``CurvlinopsEF``) is the reference on the same network,
data and prior. Its conventions, and how they map here:

- it tempers the likelihood only (``temperature``): bayesflow's ``likelihood`` convention
  at T is laplace-torch at T; the ``posterior`` convention at T is laplace-torch at T with
  the prior precision δ / T (covariance ``T (C + δ)⁻¹ = (C/T + δ/T)⁻¹``);
- one full batch (its factors are then sums over the data, its input factor a mean); a
  regression's curvature is its unit-noise factors times ``1/σ²`` (``_H_factor``), which is
  bayesflow's GGN for any σ but its empirical Fisher only for σ = 1 (laplace-torch squares
  the gradient of ``(f − y)²/2``, not of the log likelihood), so the regressions use σ = 1.

Tolerances: float64 throughout; the factors and the covariances are sums in another order
(a few hundred terms), so they agree to 1e-9 relative; Monte Carlo comparisons state their
standard errors where they are made.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from bayesflow.engines.base import Posterior, Problem
from bayesflow.engines.fit import fit
from bayesflow.engines.kfac import kfac_layers, log_det_precision, unpack
from bayesflow.errors import StageError
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.models import cnn, linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.subset import restrict_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import CASES, NOISE_SD, PRIOR_VARIANCE, Regression, exact, run

laplace = pytest.importorskip("laplace")
curvature = pytest.importorskip("laplace.curvature")

NAMES = ["laplace_kfac_ggn", "laplace_kfac_fisher"]
BACKENDS = {"laplace_kfac_ggn": "CurvlinopsGGN", "laplace_kfac_fisher": "CurvlinopsEF"}
NUM_DATA, PRIOR = 60, 2.0
TOLERANCE = {"rtol": 1e-9, "atol": 1e-12}


def network(task: str, model: nn.Module | None = None) -> tuple[nn.Module, Problem, Tensor, Tensor]:
    """A float64 MLP 4-6-6-k (tanh) on random data: three classes, or a unit-noise regression."""
    generator = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    classes = 3 if task == "classification" else 1
    model = (model or mlp(4, classes, hidden=[6, 6], activation="tanh")).double()
    inputs = torch.randn(NUM_DATA, 4, generator=generator, dtype=torch.float64)
    if task == "classification":
        targets = torch.randint(0, classes, (NUM_DATA,), generator=generator)
        likelihood = categorical()
    else:
        targets = inputs.sum(1).sin() + 0.3 * torch.randn(NUM_DATA, generator=generator, dtype=torch.float64)
        likelihood = gaussian(1.0)
    problem = build_problem(model, likelihood, diag_normal(PRIOR), NUM_DATA)
    return model, problem, inputs, targets


def fit_kfac(
    name: str, problem: Problem, data: tuple[Tensor, Tensor], params: Tensor,
    temperature: float = 1.0, convention: str = "posterior", batch_size: int | None = None,
) -> tuple[Any, Posterior]:
    """The state and posterior of a KFAC engine at ``params``."""
    spec = METHODS.get(name).spec.model_validate({"engine": name, "batch_size": batch_size})
    tempering = Tempering(temperature, NUM_DATA, convention)  # type: ignore[arg-type]
    engine = METHODS.get(name).builder()(problem, tempering, spec)
    result = fit(engine, params, *data, torch.Generator().manual_seed(0))
    return result.state, result.posterior


def reference(
    name: str, model: nn.Module, params: Tensor, data: tuple[Tensor, Tensor], task: str,
    temperature: float = 1.0, convention: str = "posterior", subset: str = "all",
) -> Any:
    """laplace-torch's Kronecker Laplace of ``model`` at ``params`` under the same prior."""
    from torch.utils.data import DataLoader, TensorDataset

    torch.nn.utils.vector_to_parameters(params, model.parameters())
    prior = 1 / PRIOR if convention == "likelihood" else 1 / (PRIOR * temperature)
    backend = getattr(curvature, BACKENDS[name])
    approximation = laplace.Laplace(
        model, task, subset_of_weights=subset, hessian_structure="kron",
        prior_precision=prior, temperature=temperature, backend=backend,
    )
    inputs, targets = data
    if task == "regression":  # laplace-torch wants targets shaped as the outputs
        targets = targets.unsqueeze(-1)
    approximation.fit(DataLoader(TensorDataset(inputs, targets), batch_size=NUM_DATA))
    return approximation


@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("name", NAMES)
def test_kronecker_factors_equal_laplace_torch(name: str, task: str) -> None:
    """Every layer's weight block G ⊗ A and bias block G are laplace-torch's, GGN and
    empirical Fisher, classification and regression; for classification so are the factors
    themselves (for a regression laplace-torch scales them by √(1/2) each, its ``factor``
    of the loss ``(f − y)²/2`` spread over the two factors, so only the products compare).

    laplace-torch's empirical Fisher of a regression is twice the empirical Fisher of its
    own loss: it squares the gradient of the sum-reduced ``MSELoss``, 2(f − y), and then
    halves the result (``factor`` 1/2) where the square's factor is 1/4. bayesflow's is
    ``Σ rᵢ²/σ⁴ ...``, the square of the log likelihood's gradient (checked in closed form
    in :func:`test_one_output_fisher_is_the_kronecker_formula`)."""
    model, problem, inputs, targets = network(task)
    params = problem.init_params(torch.Generator().manual_seed(2))
    state, _ = fit_kfac(name, problem, (inputs, targets), params)
    theirs = reference(name, model, params, (inputs, targets), task).H_facs.kfacs
    layers = kfac_layers(problem, name)
    factors = unpack(layers, state.curvature)
    assert len(theirs) == 2 * len(factors) == 6
    scale = 2.0 if (task, name) == ("regression", "laplace_kfac_fisher") else 1.0
    for number, (input_sum, gradient, rows) in enumerate(factors):
        their_gradient, their_inputs = theirs[2 * number]
        assert float(rows) == NUM_DATA
        torch.testing.assert_close(scale * torch.kron(gradient, input_sum / rows),
                                   torch.kron(their_gradient, their_inputs), **TOLERANCE)
        torch.testing.assert_close(scale * gradient, theirs[2 * number + 1][0], **TOLERANCE)
        if task == "classification":
            torch.testing.assert_close(gradient, their_gradient, **TOLERANCE)
            torch.testing.assert_close(input_sum / rows, their_inputs, **TOLERANCE)


@pytest.mark.parametrize("name", NAMES)
def test_factors_do_not_depend_on_the_batch_size(name: str) -> None:
    """Minibatches of 16 accumulate the same sums as one full batch."""
    _, problem, inputs, targets = network("classification")
    params = problem.init_params(torch.Generator().manual_seed(2))
    full, _ = fit_kfac(name, problem, (inputs, targets), params)
    batched, _ = fit_kfac(name, problem, (inputs, targets), params, batch_size=16)
    torch.testing.assert_close(batched.curvature, full.curvature, **TOLERANCE)


@pytest.mark.parametrize(("temperature", "convention"), CASES[:1] + [(0.3, "posterior"), (0.3, "likelihood")])
@pytest.mark.parametrize("subset", ["all", "last_layer"])
@pytest.mark.parametrize(("name", "task"), [
    ("laplace_kfac_ggn", "classification"), ("laplace_kfac_fisher", "classification"),
    ("laplace_kfac_ggn", "regression"),  # its empirical Fisher differs (see above)
])
def test_posterior_variances_and_log_determinant_equal_laplace_torch(
    name: str, task: str, subset: str, temperature: float, convention: str
) -> None:
    """The marginal variances, the whole network's or the last layer's (``parameters:
    ["4.*"]``, laplace-torch's ``subset_of_weights="last_layer"``), and log det of the
    precision are laplace-torch's at two temperatures and both conventions."""
    model, full, inputs, targets = network(task)
    params = full.init_params(torch.Generator().manual_seed(2))
    problem, start = full, params
    if subset == "last_layer":
        problem, embedding = restrict_problem(full, params, ["4.*"])
        start = embedding.restrict(params)
    state, posterior = fit_kfac(name, problem, (inputs, targets), start, temperature, convention)
    theirs = reference(name, model, params, (inputs, targets), task, temperature,
                       convention, subset)
    covariance = theirs.posterior_precision.to_matrix(exponent=-1)
    assert posterior.var is not None and posterior.var.shape == (problem.dimension,)
    torch.testing.assert_close(posterior.var, covariance.diagonal(), **TOLERANCE)
    prior_weight = Tempering(temperature, NUM_DATA, convention).prior_weight  # type: ignore[arg-type]
    log_det = log_det_precision(problem, state.curvature, prior_weight)
    tempered = log_det - problem.dimension * math.log(temperature)
    torch.testing.assert_close(tempered, theirs.log_det_posterior_precision, **TOLERANCE)


@pytest.mark.parametrize("name", NAMES)
def test_draws_have_laplace_torch_covariance_and_density(name: str) -> None:
    """Draws whitened by laplace-torch's dense covariance have mean 0 and covariance I, and
    the log density is the dense Gaussian's."""
    model, problem, inputs, targets = network("classification")
    params = problem.init_params(torch.Generator().manual_seed(2))
    _, posterior = fit_kfac(name, problem, (inputs, targets), params, 0.3)
    theirs = reference(name, model, params, (inputs, targets), "classification", 0.3)
    covariance = theirs.posterior_precision.to_matrix(exponent=-1)
    draws = posterior.sample(20_000, torch.Generator().manual_seed(3)) - params
    whitened = torch.linalg.solve_triangular(
        torch.linalg.cholesky(covariance), draws.T, upper=False
    ).T
    # 20,000 draws: each mean has sd 0.007 and each covariance entry about 0.007-0.01;
    # 0.05 is five sd or more for the largest of the 111 means and 12,321 entries.
    assert float(whitened.mean(0).abs().max()) < 0.05
    empirical = whitened.T @ whitened / whitened.shape[0]
    assert float((empirical - torch.eye(problem.dimension, dtype=torch.float64)).abs().max()) < 0.05
    dense = torch.distributions.MultivariateNormal(params, covariance_matrix=covariance)
    assert posterior.kronecker is not None
    points = draws[:5]
    torch.testing.assert_close(posterior.kronecker.log_density(points), dense.log_prob(points + params),
                               **TOLERANCE)


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
@pytest.mark.parametrize("name", NAMES)
def test_sampled_predictive_agrees_with_laplace_torch(name: str) -> None:
    """The predictive class probabilities of 4,000 draws of the last layer agree with
    laplace-torch's ``pred_type="nn"``, ``link_approx="mc"`` of 4,000 draws at T = 3,
    within 5 Monte Carlo standard errors, and differ from the mode's by more than that."""
    model, full, inputs, targets = network("classification")
    params = full.init_params(torch.Generator().manual_seed(2))
    problem, embedding = restrict_problem(full, params, ["4.*"])
    _, posterior = fit_kfac(name, problem, (inputs, targets), embedding.restrict(params), 3.0)
    theirs = reference(name, model, params, (inputs, targets), "classification", 3.0,
                       subset="last_layer")
    test_inputs = torch.randn(20, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    count = 4000
    draws = embedding(posterior).sample(count, torch.Generator().manual_seed(6))
    probabilities = torch.stack([full.forward(draw, test_inputs).softmax(-1) for draw in draws])
    ours = probabilities.mean(0)
    torch.manual_seed(7)
    with torch.no_grad():
        predicted = theirs(test_inputs, pred_type="nn", link_approx="mc", n_samples=count)
    # Standard error of the difference of two means of `count` draws (the same posterior).
    error = (2 * probabilities.var(0) / count).sqrt()
    assert float(((ours - predicted).abs() / error).max()) < 5
    mode = full.forward(params, test_inputs).softmax(-1)
    assert float(((ours - mode).abs() / error).max()) > 5


# The closed-form check of laplace_kfac_ggn on a one-output linear model is a row of test_closed_form.CLOSED_FORM.


@pytest.mark.parametrize(("temperature", "convention"), CASES)
def test_one_output_fisher_is_the_kronecker_formula(
    regression: Regression, temperature: float, convention: str
) -> None:
    """The KFAC empirical Fisher of a one-output linear regression is
    ``(Σ rᵢ²/σ⁴) · XᵀX / N`` (G is 1 × 1), tempered as every Laplace."""
    _, inputs, targets = regression
    mean = exact(inputs, targets, 1.0, "posterior").mean
    residuals = targets - inputs @ mean
    fisher = (residuals**2).sum() / NOISE_SD**4 * inputs.T @ inputs / inputs.shape[0]
    weight = Tempering(temperature, inputs.shape[0], convention).prior_weight  # type: ignore[arg-type]
    precision = fisher + weight * torch.eye(3, dtype=inputs.dtype) / PRIOR_VARIANCE
    posterior = run("laplace_kfac_fisher", regression, temperature, convention, mean)
    expected = temperature * torch.linalg.inv(precision).diagonal()
    torch.testing.assert_close(posterior.var, expected, rtol=1e-10, atol=1e-14)


def test_convolutions_equal_laplace_torch() -> None:
    """A CNN's convolution factors (unfolded patches, "expand") and its head's are
    laplace-torch's, and so are the variances."""
    model = cnn(36, 3, image_shape=[1, 6, 6], channels=[3], kernel_size=3)
    generator = torch.Generator().manual_seed(1)
    model, problem, _, targets = network("classification", model)
    inputs = torch.randn(NUM_DATA, 36, generator=generator, dtype=torch.float64)
    params = problem.init_params(torch.Generator().manual_seed(2))
    state, posterior = fit_kfac("laplace_kfac_ggn", problem, (inputs, targets), params)
    theirs = reference("laplace_kfac_ggn", model, params, (inputs, targets), "classification")
    factors = unpack(kfac_layers(problem, "laplace_kfac_ggn"), state.curvature)
    for number, (input_sum, gradient, rows) in enumerate(factors):
        torch.testing.assert_close(gradient, theirs.H_facs.kfacs[2 * number][0], **TOLERANCE)
        torch.testing.assert_close(input_sum / rows, theirs.H_facs.kfacs[2 * number][1], **TOLERANCE)
    covariance = theirs.posterior_precision.to_matrix(exponent=-1)
    torch.testing.assert_close(posterior.var, covariance.diagonal(), **TOLERANCE)


def test_posterior_arrays_round_trip_and_embed() -> None:
    """``posterior.npz``'s arrays give back the same draws; a last-layer posterior embedded
    in the full space keeps the other entries at the mode."""
    _, full, inputs, targets = network("classification")
    params = full.init_params(torch.Generator().manual_seed(2))
    problem, embedding = restrict_problem(full, params, ["4.*"])
    _, posterior = fit_kfac("laplace_kfac_ggn", problem, (inputs, targets), embedding.restrict(params))
    embedded = embedding(posterior)
    loaded = Posterior.from_arrays(embedded.to_arrays(full))
    first = embedded.sample(50, torch.Generator().manual_seed(0))
    second = loaded.sample(50, torch.Generator().manual_seed(0))
    assert torch.equal(first, second)
    fixed = torch.ones(full.dimension, dtype=torch.bool)
    fixed[embedding.index] = False
    assert torch.equal(first[:, fixed], params[fixed].expand(50, -1))
    assert bool((first[:, ~fixed].std(0) > 0).all())


@pytest.mark.parametrize("name", NAMES)
def test_zero_temperature_is_a_point_mass(name: str) -> None:
    """At T = 0 the posterior is the mode with zero variance."""
    _, problem, inputs, targets = network("classification")
    params = problem.init_params(torch.Generator().manual_seed(2))
    _, posterior = fit_kfac(name, problem, (inputs, targets), params, 0.0)
    assert posterior.var is not None and not bool(posterior.var.any())
    assert posterior.kronecker is None


def test_refuses_parameters_outside_linear_and_convolution_layers() -> None:
    """A LayerNorm's parameters are refused at build, with the fix in the message."""
    model = nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.Linear(5, 3)).double()
    problem = build_problem(model, categorical(), diag_normal(PRIOR), NUM_DATA)
    with pytest.raises(StageError, match=r"\['1.weight', '1.bias'\].*parameters: \[...\]"):
        fit_kfac("laplace_kfac_ggn", problem, (torch.zeros(2, 4), torch.zeros(2)), torch.zeros(3))
    # The last layer alone is covered.
    subset, _ = restrict_problem(problem, torch.zeros(problem.dimension), ["2.*"])
    spec = METHODS.get("laplace_kfac_ggn").spec.model_validate({"engine": "laplace_kfac_ggn"})
    METHODS.get("laplace_kfac_ggn").builder()(subset, Tempering(1.0, NUM_DATA), spec)


def test_refuses_a_prior_that_varies_within_a_tensor() -> None:
    """KFAC needs one prior precision per tensor."""
    _, problem, _, _ = network("classification")
    varying = torch.linspace(1, 2, problem.dimension, dtype=torch.float64)
    problem = Problem(**{**problem.__dict__, "prior_precision": varying})
    spec = METHODS.get("laplace_kfac_ggn").spec.model_validate({"engine": "laplace_kfac_ggn"})
    with pytest.raises(StageError, match="one prior precision per tensor"):
        METHODS.get("laplace_kfac_ggn").builder()(problem, Tempering(1.0, NUM_DATA), spec)


def test_refuses_an_unconstrained_direction_without_a_prior() -> None:
    """With no prior, an input feature that is always 0 leaves a direction of infinite variance."""
    model = linear(3, 2).double()
    problem = build_problem(model, categorical(), diag_normal(PRIOR), 10)
    problem = Problem(**{**problem.__dict__, "prior_precision": torch.zeros(problem.dimension, dtype=torch.float64)})
    inputs = torch.randn(10, 3, dtype=torch.float64)
    inputs[:, 1] = 0
    with pytest.raises(StageError, match="infinite variance"):
        fit_kfac("laplace_kfac_ggn", problem, (inputs, torch.zeros(10, dtype=torch.long)),
                 torch.zeros(problem.dimension, dtype=torch.float64))


def test_module_imports_without_torch() -> None:
    """The method module (specs, traits, build) imports without loading torch."""
    code = (
        "import sys, bayesflow.methods.laplace_kfac; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
