"""The linearised (GLM) predictive in function space: its moments, probit and Monte Carlo.

Checked against the closed form of a linear model (where the linearisation is exact, so
``f_var = x̃ Σ x̃ᵀ``), against laplace-torch's GLM predictive on the same network, data,
prior and temperature, and for chunking: many chunks give what one chunk gives, and a tiny
memory budget does split the pass.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch.nn.utils import parameters_to_vector

from bayesflow.engines.base import Posterior, linearized_outputs
from bayesflow.engines.fit import fit
from bayesflow.engines.linearized import (
    Moments,
    functional_moments,
    moment_chunks,
    probit_probabilities,
    sample_outputs,
)
from bayesflow.engines.memory import MEMORY_VARIABLE
from bayesflow.evaluate.linearized import closed_form_scores
from bayesflow.likelihoods import bernoulli, categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.models import linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import NOISE_SD, Regression, exact
from tests.numerics import reordered

TEMPERATURES = [0.1, 1.0]


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_linear_regression_moments_are_the_closed_form(regression: Regression, temperature: float) -> None:
    """For y = w·x + b the linearisation is exact: f_mean = x̃ m, f_var = x̃ Σ x̃ᵀ."""
    problem, inputs, targets = regression
    target = exact(inputs, targets, temperature, "posterior")
    posterior = Posterior(mean=target.mean, cov=target.cov)
    moments = functional_moments(problem, posterior, inputs[:25])
    design = inputs[:25]  # the model has no bias: J(x) = x
    expected_var = torch.einsum("ni,ij,nj->n", design, target.cov, design)
    tolerance = reordered(torch.float64, problem.dimension, scale=float(expected_var.abs().max()))
    torch.testing.assert_close(moments.mean[:, 0], design @ target.mean, **tolerance)
    torch.testing.assert_close(moments.variance[:, 0, 0], expected_var, **tolerance)


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_linear_regression_closed_form_metrics(regression: Regression, temperature: float) -> None:
    """`closed_form` on a Gaussian likelihood scores N(x̃ m, x̃ Σ x̃ᵀ + σ²) exactly."""
    problem, inputs, targets = regression
    target = exact(inputs, targets, temperature, "posterior")
    posterior = Posterior(mean=target.mean, cov=target.cov)
    scores, arrays, conventions = closed_form_scores(
        problem, gaussian(NOISE_SD), posterior, inputs, targets, ece_bins=10,
        ece_binning="equal_width", coverage_levels=[0.5, 0.9],
    )
    design = inputs  # the model has no bias: J(x) = x
    mean = (design @ target.mean).numpy()
    sd = np.sqrt(torch.einsum("ni,ij,nj->n", design, target.cov, design).numpy() + NOISE_SD**2)
    observed = targets.numpy()
    np.testing.assert_allclose(scores["test_nll"], -norm.logpdf(observed, mean, sd).mean(), rtol=1e-10)
    np.testing.assert_allclose(scores["test_rmse"], np.sqrt(((observed - mean) ** 2).mean()), rtol=1e-10)
    inside = np.abs(norm.cdf(observed, mean, sd) - 0.5) <= 0.45
    assert scores["test_coverage_90"] == pytest.approx(inside.mean())
    np.testing.assert_allclose(arrays["predictive_cdf"], norm.cdf(observed, mean, sd), rtol=1e-9)
    assert "test_nll_single" not in scores
    # a regression's closed form is the exact Gaussian, and its convention says so, not "probit"
    assert "exact" in conventions["predictive"] and "probit" not in conventions["predictive"]


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_linear_classifier_diagonal_functional_variance(temperature: float) -> None:
    """A linear 3-class classifier, diagonal Σ: f_var[c, c] = Σⱼ xⱼ² var[c, j] + var[b_c],
    zero off the diagonal (each class has its own weights)."""
    problem = build_problem(linear(4, 3).double(), categorical(), diag_normal(), 10)
    generator = torch.Generator().manual_seed(3)
    mean = problem.init_params(generator)
    var = temperature * torch.rand(problem.dimension, generator=generator, dtype=torch.float64)
    inputs = torch.randn(9, 4, generator=generator, dtype=torch.float64)
    moments = functional_moments(problem, Posterior(mean=mean, var=var), inputs)
    weights, biases = var[:12].reshape(3, 4), var[12:]
    expected = torch.diag_embed(inputs**2 @ weights.T + biases)
    torch.testing.assert_close(moments.variance, expected, **reordered(torch.float64, 4, scale=1.0))


def test_bernoulli_probit_is_the_two_class_probit_with_a_zero_logit() -> None:
    """One logit f with variance v: sigmoid(f/√(1+πv/8)) = the categorical probit of (0, f)."""
    mean = torch.tensor([[-2.0], [0.3], [4.0]], dtype=torch.float64)
    variance = torch.tensor([0.5, 2.0, 9.0], dtype=torch.float64).reshape(3, 1, 1)
    binary = probit_probabilities(Moments(mean, variance), bernoulli())
    two = Moments(torch.cat([torch.zeros_like(mean), mean], 1), torch.diag_embed(
        torch.cat([torch.zeros(3, 1, dtype=torch.float64), variance[:, 0]], 1)))
    torch.testing.assert_close(binary, probit_probabilities(two, categorical()))
    expected = torch.sigmoid(mean[:, 0] / torch.sqrt(1 + math.pi / 8 * variance[:, 0, 0]))
    torch.testing.assert_close(binary[:, 1], expected)


def test_sampled_outputs_have_the_moments() -> None:
    """Outputs drawn by `sample_outputs` have mean f_mean and covariance f_var (MC error)."""
    generator = torch.Generator().manual_seed(0)
    root = torch.randn(4, 3, 3, generator=generator, dtype=torch.float64)
    moments = Moments(torch.randn(4, 3, generator=generator, dtype=torch.float64), root @ root.mT)
    draws = sample_outputs(moments, 40_000, torch.Generator().manual_seed(1))
    centred = draws - moments.mean
    scale = moments.variance.diagonal(dim1=-2, dim2=-1).sqrt()
    # 6 standard errors of a mean and of a covariance (4 sds²/√S at most) over 40,000 draws.
    assert bool(((centred.mean(0) / scale).abs() < 6 / 200).all())
    covariance = torch.einsum("snk,snl->nkl", centred, centred) / draws.shape[0]
    bound = 6 * 2 * scale.unsqueeze(-1) * scale.unsqueeze(-2) / 200
    assert bool(((covariance - moments.variance).abs() < bound).all())


def _classifier() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = mlp(2, 3, hidden=[6], activation="tanh").double()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(30, 2, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (30,), generator=generator)
    test = torch.randn(7, 2, generator=generator, dtype=torch.float64)
    return model, inputs, labels, test


def _laplace_torch(model: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor,
                   temperature: float, structure: str) -> object:
    laplace = pytest.importorskip("laplace")
    from torch.utils.data import DataLoader, TensorDataset

    fitted = laplace.Laplace(
        model, "classification", subset_of_weights="all", hessian_structure=structure,
        prior_precision=1 / PRIOR_VARIANCE, temperature=temperature,
    )
    fitted.fit(DataLoader(TensorDataset(inputs, labels), batch_size=10))
    return fitted


PRIOR_VARIANCE = 2.0


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_glm_predictive_matches_laplace_torch(temperature: float, structure: str) -> None:
    """Same network, data, prior and tempered GGN posterior (bayesflow's likelihood
    convention is laplace-torch's temperature): f_mean, f_var, probit and MC predictives
    match laplace-torch's ``pred_type='glm'``."""
    model, inputs, labels, test = _classifier()
    reference = _laplace_torch(model, inputs, labels, temperature, structure)
    problem = build_problem(model, categorical(), diag_normal(PRIOR_VARIANCE), inputs.shape[0])
    mean = parameters_to_vector(model.parameters()).detach()
    name = "laplace_dense_ggn" if structure == "full" else "laplace_diag_ggn"
    spec = METHODS.get(name).spec.model_validate({"engine": name, "batch_size": None})
    engine = METHODS.get(name).builder()(
        problem, Tempering(temperature, inputs.shape[0], "likelihood"), spec
    )
    posterior = fit(engine, mean, inputs, labels, torch.Generator().manual_seed(0)).posterior
    # laplace-torch's GGN agrees with bayesflow's to about 2e-8 relative (its backend does
    # not sum in float64 throughout), which the inversion amplifies by the condition number.
    if structure == "full":
        torch.testing.assert_close(posterior.cov, reference.posterior_covariance, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(posterior.var, reference.posterior_variance, rtol=1e-5, atol=1e-5)
    moments = functional_moments(problem, posterior, test)
    f_mean, f_var = reference._glm_predictive_distribution(test)
    torch.testing.assert_close(moments.mean, f_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(moments.variance, f_var, rtol=1e-5, atol=1e-5)
    # With laplace-torch's own covariance the predictive is the same computation.
    same = Posterior(mean=mean, cov=reference.posterior_covariance) if structure == "full" else \
        Posterior(mean=mean, var=reference.posterior_variance)
    exact_moments = functional_moments(problem, same, test)
    torch.testing.assert_close(exact_moments.variance, f_var, **reordered(torch.float64, mean.numel(), scale=1.0))
    probit = probit_probabilities(exact_moments, categorical())
    torch.testing.assert_close(probit, reference(test, link_approx="probit"), rtol=1e-10, atol=1e-12)
    count = 20_000
    ours = categorical().probabilities(
        sample_outputs(exact_moments, count, torch.Generator().manual_seed(2))).mean(0)
    theirs = reference(test, link_approx="mc", n_samples=count)
    # Two independent MC estimates of a probability: 6 standard errors of their difference.
    assert float((ours - theirs).abs().max()) < 6 * math.sqrt(2 * 0.25 / count)


def _mlp_case() -> tuple[object, Posterior, torch.Tensor]:
    problem = build_problem(mlp(5, 3, hidden=[16, 8], activation="tanh").double(), categorical(),
                            diag_normal(), 10)
    generator = torch.Generator().manual_seed(0)
    mean = problem.init_params(generator)
    root = torch.randn(problem.dimension, problem.dimension, generator=generator, dtype=torch.float64)
    cov = 1e-3 * root @ root.T
    return problem, Posterior(mean=mean, cov=cov), torch.randn(40, 5, generator=generator, dtype=torch.float64)


def test_chunked_moments_equal_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny memory budget splits the test points into many chunks; the moments are
    those of one chunk (the same sums, in other groupings)."""
    problem, posterior, inputs = _mlp_case()
    monkeypatch.setenv(MEMORY_VARIABLE, "64GiB")
    whole = list(moment_chunks(problem, posterior, inputs))
    monkeypatch.setenv(MEMORY_VARIABLE, "40KiB")
    pieces = list(moment_chunks(problem, posterior, inputs))
    assert len(whole) == 1 and len(pieces) > 4
    assert sum(piece.mean.shape[0] for piece in pieces) == inputs.shape[0]
    tolerance = reordered(torch.float64, problem.dimension, scale=float(whole[0].variance.abs().max()))
    torch.testing.assert_close(torch.cat([piece.mean for piece in pieces]), whole[0].mean, **tolerance)
    torch.testing.assert_close(torch.cat([piece.variance for piece in pieces]), whole[0].variance, **tolerance)


def test_monte_carlo_over_outputs_does_not_depend_on_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """`linearized_mc` draws the noise once for all points, so chunking changes no draw
    beyond rounding."""
    problem, posterior, inputs = _mlp_case()
    monkeypatch.setenv(MEMORY_VARIABLE, "64GiB")
    whole = sample_outputs(functional_moments(problem, posterior, inputs), 30, torch.Generator().manual_seed(5))
    monkeypatch.setenv(MEMORY_VARIABLE, "40KiB")
    chunked = sample_outputs(functional_moments(problem, posterior, inputs), 30, torch.Generator().manual_seed(5))
    torch.testing.assert_close(chunked, whole, **reordered(torch.float64, problem.dimension, scale=10.0))


def test_moments_are_the_law_of_linearised_parameter_samples() -> None:
    """`linearized` (parameter samples through the linearised network) has the moments
    f_mean and f_var: the two GLM predictives agree within Monte Carlo error."""
    problem, posterior, inputs = _mlp_case()
    moments = functional_moments(problem, posterior, inputs[:10])
    count = 20_000
    outputs = linearized_outputs(problem, posterior, inputs[:10], count, torch.Generator().manual_seed(7))
    centred = outputs - moments.mean
    scale = moments.variance.diagonal(dim1=-2, dim2=-1).sqrt()
    assert bool(((centred.mean(0) / scale).abs() < 6 / math.sqrt(count)).all())
    covariance = torch.einsum("snk,snl->nkl", centred, centred) / count
    bound = 6 * 2 * scale.unsqueeze(-1) * scale.unsqueeze(-2) / math.sqrt(count)
    assert bool(((covariance - moments.variance).abs() < bound).all())


def _kronecker_posterior(mean: torch.Tensor, var: torch.Tensor, blocks: list[dict[str, torch.Tensor]]) -> object:
    """A Posterior with Kronecker-factored blocks: bayesflow's own classes where this tree
    has them (engines/kronecker.py, KFAC Laplace), else a stand-in with the same fields."""
    try:
        from bayesflow.engines.kronecker import KroneckerBlock, KroneckerCovariance
    except ImportError:
        from types import SimpleNamespace

        covariance = SimpleNamespace(blocks=tuple(SimpleNamespace(**block) for block in blocks))
        return SimpleNamespace(mean=mean, var=var, cov=None, samples=None, kronecker=covariance)
    covariance = KroneckerCovariance(tuple(KroneckerBlock(**block) for block in blocks))
    return Posterior(mean=mean, var=var, kronecker=covariance)  # type: ignore[call-arg]


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_kronecker_blocks_give_the_dense_functional_variance(temperature: float) -> None:
    """Σ of Kronecker blocks (Q_G ⊗ Q_A) diag(V) (Q_G ⊗ Q_A)ᵀ on two weight matrices, a
    diagonal elsewhere: J Σ Jᵀ computed block by block equals J Σ Jᵀ with Σ formed densely."""
    problem = build_problem(mlp(5, 3, hidden=[4], activation="tanh").double(), categorical(),
                            diag_normal(), 10)
    generator = torch.Generator().manual_seed(2)
    mean = problem.init_params(generator)
    var = temperature * torch.rand(problem.dimension, generator=generator, dtype=torch.float64)
    dense = torch.diag(var)
    blocks, offset = [], 0
    for shape in problem.param_shapes:
        size = math.prod(shape)
        if len(shape) == 2:
            index = torch.arange(offset, offset + size).reshape(shape)
            output_vectors = torch.linalg.qr(torch.randn(shape[0], shape[0], generator=generator, dtype=torch.float64))[0]
            input_vectors = torch.linalg.qr(torch.randn(shape[1], shape[1], generator=generator, dtype=torch.float64))[0]
            scale = temperature * torch.rand(shape, generator=generator, dtype=torch.float64) + 0.1
            rotation = torch.kron(output_vectors, input_vectors)
            block = rotation @ torch.diag(scale.reshape(-1) ** 2) @ rotation.T
            flat = index.reshape(-1)
            dense[flat.unsqueeze(1), flat.unsqueeze(0)] = block
            var[flat] = block.diagonal()
            blocks.append({"index": index, "output_vectors": output_vectors,
                           "input_vectors": input_vectors, "scale": scale})
        offset += size
    inputs = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    expected = functional_moments(problem, Posterior(mean=mean, cov=dense), inputs)
    moments = functional_moments(problem, _kronecker_posterior(mean, var, blocks), inputs)  # type: ignore[arg-type]
    tolerance = reordered(torch.float64, problem.dimension, scale=float(expected.variance.abs().max()))
    torch.testing.assert_close(moments.variance, expected.variance, **tolerance)


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_kfac_glm_predictive_matches_laplace_torch(temperature: float) -> None:
    """KFAC Laplace (where this tree has it) and laplace-torch's ``hessian_structure='kron'``
    on the same network, data, prior and temperature give the same f_var and probit
    predictive (laplace-torch: J Σ Jᵀ from its Kronecker-factored precision)."""
    pytest.importorskip("bayesflow.engines.kfac")
    curvature = pytest.importorskip("laplace.curvature")
    laplace = pytest.importorskip("laplace")
    from torch.utils.data import DataLoader, TensorDataset

    model, inputs, labels, test = _classifier()
    mean = parameters_to_vector(model.parameters()).detach()
    reference = laplace.Laplace(
        model, "classification", subset_of_weights="all", hessian_structure="kron",
        prior_precision=1 / PRIOR_VARIANCE, temperature=temperature, backend=curvature.CurvlinopsGGN,
    )
    reference.fit(DataLoader(TensorDataset(inputs, labels), batch_size=inputs.shape[0]))
    problem = build_problem(model, categorical(), diag_normal(PRIOR_VARIANCE), inputs.shape[0])
    name = "laplace_kfac_ggn"
    spec = METHODS.get(name).spec.model_validate({"engine": name, "batch_size": None})
    engine = METHODS.get(name).builder()(
        problem, Tempering(temperature, inputs.shape[0], "likelihood"), spec
    )
    posterior = fit(engine, mean, inputs, labels, torch.Generator().manual_seed(0)).posterior
    moments = functional_moments(problem, posterior, test)
    f_mean, f_var = reference._glm_predictive_distribution(test)
    torch.testing.assert_close(moments.mean, f_mean, rtol=1e-12, atol=1e-12)
    # Both sum the factors over the data in another order (about 1e-9 relative, as the KFAC
    # tests find for the factors themselves).
    torch.testing.assert_close(moments.variance, f_var, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(probit_probabilities(moments, categorical()),
                               reference(test, link_approx="probit"), rtol=1e-7, atol=1e-9)
