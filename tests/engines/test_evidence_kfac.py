"""The Laplace evidence of a KFAC fit, and its evidence-chosen prior, against laplace-torch.

Before the KFAC state gave the evidence its own log-determinant, the fit stage read its
packed factors (Σ aaᵀ, G and R of every layer: 172 numbers for the 93 parameters of the
classifier here) as a diagonal curvature: with the spec's (d,) prior precision it failed
with a shape error, and a scalar precision would have summed logs of the packed entries.
Here the evidence is laplace-torch's ``Laplace(..., hessian_structure="kron")``
``log_marginal_likelihood()`` on the same network, data and prior (the curvlinops
backends and helpers of ``tests/engines/test_laplace_kfac.py``), and the chosen prior is
its ``optimize_prior_precision(method="marglik")``, scalar and layerwise.

Tolerances: the evidence and the posterior variances are sums of the same float64 terms
in other orders (1e-9 relative); the chosen precisions are laplace-torch's Adam on log α
run until it settles against our Newton steps (1e-5 scalar, 1e-4 layerwise, as
``tests/engines/test_evidence.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from bayesflow.engines.base import Problem
from bayesflow.engines.evidence import dense_log_det, log_evidence, mode_fit, normal_log_prior
from bayesflow.engines.evidence_prior import choose_prior
from bayesflow.errors import StageError
from bayesflow.likelihoods import categorical, gaussian
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.subset import restrict_problem
from bayesflow.temperature import Tempering
from tests.engines.test_laplace_kfac import NUM_DATA, TOLERANCE, fit_kfac, network, reference

laplace = pytest.importorskip("laplace")

# laplace-torch's empirical Fisher of a regression is not the log likelihood's
# (test_laplace_kfac.py), so regressions compare the GGN only.
CASES = [("laplace_kfac_ggn", "classification"), ("laplace_kfac_fisher", "classification"),
         ("laplace_kfac_ggn", "regression")]


class KfacCase:
    """A KFAC fit of :func:`network` at its initial weights, the whole network or its last
    layer (``parameters: ["4.*"]``), under the prior N(0, 1/precision)."""

    def __init__(self, name: str, task: str, subset: str, precision: float = 0.5) -> None:
        self.name, self.task, self.subset = name, task, subset
        self.model, _, self.inputs, self.targets = network(task)
        likelihood = categorical() if task == "classification" else gaussian(1.0)
        full = build_problem(self.model, likelihood, diag_normal(1.0 / precision), NUM_DATA)
        self.params = full.init_params(torch.Generator().manual_seed(2))
        self.problem: Problem = full
        start = self.params
        if subset == "last_layer":
            self.problem, embedding = restrict_problem(full, self.params, ["4.*"])
            start = embedding.restrict(self.params)
        self.state, _ = fit_kfac(name, self.problem, (self.inputs, self.targets), start)
        self.mode = mode_fit(self.problem, self.state.params, self.inputs, self.targets)

    def choose(self, **settings: Any) -> tuple[Problem, Any, dict[str, float]]:
        curvature = METHODS.get(self.name).traits.curvature or ""
        return choose_prior(self.problem, self.state, self.mode, curvature_name=curvature, **settings)

    def reference(self, temperature: float = 1.0) -> Any:
        return reference(self.name, self.model, self.params, (self.inputs, self.targets), self.task,
                         temperature, subset=self.subset)

    def posterior_var(self, problem: Problem, state: Any, temperature: float = 1.0) -> Tensor:
        method = METHODS.get(self.name)
        spec = method.spec.model_validate({"engine": self.name})
        posterior = method.builder()(problem, Tempering(temperature, NUM_DATA), spec).posterior(state)
        assert posterior.var is not None
        return posterior.var


def their_variances(theirs: Any) -> Tensor:
    return theirs.posterior_precision.to_matrix(exponent=-1).diagonal()


@pytest.mark.parametrize("precision", [0.3, 2.0])
@pytest.mark.parametrize("subset", ["all", "last_layer"])
@pytest.mark.parametrize(("name", "task"), CASES)
def test_log_evidence_equals_laplace_torch(name: str, task: str, subset: str, precision: float) -> None:
    """The logged ``log_evidence`` is laplace-torch's kron marginal likelihood."""
    found = KfacCase(name, task, subset, precision)
    _, _, metrics = found.choose()
    theirs = found.reference().log_marginal_likelihood(torch.tensor(precision, dtype=torch.float64))
    assert metrics["log_evidence"] == pytest.approx(float(theirs), rel=1e-10, abs=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("subset", ["all", "last_layer"])
@pytest.mark.parametrize(("name", "task"), CASES)
def test_chosen_prior_and_its_posterior_equal_laplace_torch(name: str, task: str, subset: str) -> None:
    """One precision for every parameter: laplace-torch's marglik optimum, its evidence
    there, and the posterior variances of the engine built on the chosen prior."""
    found = KfacCase(name, task, subset)
    chosen, state, metrics = found.choose(prior_auto=True)
    theirs = found.reference()
    theirs.optimize_prior_precision(method="marglik", n_steps=1500, lr=0.1, init_prior_prec=0.5)
    precision = 1 / metrics["prior_variance_chosen"]
    assert precision == pytest.approx(float(theirs.prior_precision), rel=1e-5)
    assert metrics["log_evidence"] == pytest.approx(float(theirs.log_marginal_likelihood()), rel=1e-9)
    assert metrics["log_evidence"] > metrics["log_evidence_spec_prior"]
    # At exactly our precision laplace-torch's posterior is ours: the engine reads the
    # chosen problem's prior, not the spec's.
    theirs.prior_precision = torch.tensor(precision, dtype=torch.float64)
    torch.testing.assert_close(found.posterior_var(chosen, state), their_variances(theirs), **TOLERANCE)
    assert not torch.allclose(found.posterior_var(found.problem, state), their_variances(theirs), rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "task"), CASES)
def test_chosen_prior_per_tensor_equals_laplace_torch_layerwise(name: str, task: str) -> None:
    """One precision per tensor (``auto_per_tensor``) is laplace-torch's layerwise marglik
    optimum, and the posterior on it is laplace-torch's with those precisions."""
    found = KfacCase(name, task, "all")
    chosen, state, metrics = found.choose(prior_auto=True, per_tensor=True)
    theirs = found.reference()
    theirs.optimize_prior_precision(method="marglik", n_steps=3000, lr=0.05, init_prior_prec=0.5,
                                    prior_structure="layerwise")
    ours = [1 / metrics[f"prior_variance_chosen/{name}"] for name in found.problem.param_names]
    assert len(ours) == 6
    np.testing.assert_allclose(ours, theirs.prior_precision.detach().numpy(), rtol=1e-4)
    assert metrics["log_evidence"] == pytest.approx(float(theirs.log_marginal_likelihood()), rel=1e-9)
    theirs.prior_precision = torch.tensor(ours, dtype=torch.float64)
    torch.testing.assert_close(found.posterior_var(chosen, state), their_variances(theirs), **TOLERANCE)


@pytest.mark.parametrize(("name", "task"), CASES)
def test_chosen_prior_per_tensor_of_a_last_layer_maximises_laplace_torch_evidence(name: str, task: str) -> None:
    """A last layer's one precision per tensor maximises the evidence of laplace-torch's
    last-layer Kronecker curvature taken dense (its last-layer Laplace has no layerwise
    prior): the log-determinants agree and the dense evidence's gradient vanishes there."""
    found = KfacCase(name, task, "last_layer")
    chosen, _, metrics = found.choose(prior_auto=True, per_tensor=True)
    theirs = found.reference()
    curvature = theirs.H.to_matrix() * theirs._H_factor
    torch.testing.assert_close(found.state.log_det(chosen.prior_precision),
                               dense_log_det(curvature)(chosen.prior_precision), **TOLERANCE)
    sizes = [math.prod(shape) for shape in found.problem.param_shapes]
    logs = torch.tensor([-math.log(metrics[f"prior_variance_chosen/{name}"]) for name in found.problem.param_names],
                        dtype=torch.float64, requires_grad=True)
    precision = torch.repeat_interleave(logs.exp(), torch.tensor(sizes))
    evidence = log_evidence(found.mode.log_likelihood, normal_log_prior(found.state.params, precision),
                            found.problem.dimension, dense_log_det(curvature)(precision))
    assert float(evidence.detach()) == pytest.approx(metrics["log_evidence"], rel=1e-10)
    (gradient,) = torch.autograd.grad(evidence, logs)
    assert float(gradient.abs().max()) < 1e-6


@pytest.mark.parametrize("subset", ["all", "last_layer"])
def test_evidence_is_temperature_free_and_the_covariance_scales_with_it(subset: str) -> None:
    """At T = 0.3 and 3 (``posterior`` convention) the evidence and the chosen prior are
    one, and the posterior on the chosen prior is laplace-torch's at T (prior δ*/T)."""
    found = KfacCase("laplace_kfac_ggn", "classification", subset)
    results = {}
    for temperature in (0.3, 3.0):
        state, _ = fit_kfac(found.name, found.problem, (found.inputs, found.targets), found.state.params,
                            temperature)
        chosen, state, metrics = choose_prior(found.problem, state, found.mode, curvature_name="kfac_ggn",
                                              prior_auto=True)
        var = found.posterior_var(chosen, state, temperature)
        theirs = found.reference(temperature)
        theirs.prior_precision = torch.tensor(1 / (metrics["prior_variance_chosen"] * temperature),
                                              dtype=torch.float64)
        torch.testing.assert_close(var, their_variances(theirs), **TOLERANCE)
        results[temperature] = (metrics, var)
    (cold, cold_var), (hot, hot_var) = results[0.3], results[3.0]
    assert cold["log_evidence"] == pytest.approx(hot["log_evidence"], rel=1e-12)
    assert cold["prior_variance_chosen"] == pytest.approx(hot["prior_variance_chosen"], rel=1e-12)
    torch.testing.assert_close(hot_var, 10 * cold_var, rtol=1e-10, atol=0)


def test_chosen_noise_maximises_laplace_torch_evidence_and_rescales_the_factors() -> None:
    """Regression with ``noise_sd: auto``: (α, σ) maximise laplace-torch's kron marginal
    likelihood, and the rescaled state is the KFAC computed afresh at the chosen σ."""
    found = KfacCase("laplace_kfac_ggn", "regression", "all")
    chosen, state, metrics = found.choose(prior_auto=True, noise_sd=1.0)
    noise, precision = metrics["noise_sd_chosen"], 1 / metrics["prior_variance_chosen"]
    assert noise != pytest.approx(1.0, rel=1e-3)  # it moved
    theirs = found.reference()

    def their_evidence(log_precision: float, log_noise: float) -> float:
        values = torch.tensor([log_precision, log_noise], dtype=torch.float64).exp()
        return float(theirs.log_marginal_likelihood(values[0], values[1]))

    point = (math.log(precision), math.log(noise))
    assert metrics["log_evidence"] == pytest.approx(their_evidence(*point), rel=1e-10)
    # A maximum of laplace-torch's function: central differences in (log α, log σ) vanish
    # (step 1e-5: truncation about 1e-10, rounding about 1e-9). Differences, not autograd:
    # laplace-torch's autograd gradient in log σ of its kron evidence is −12.2 here, where
    # its own central difference is 3e-9 (the diag and full ones agree with theirs).
    step = 1e-5
    for shift in ((step, 0.0), (0.0, step)):
        plus = their_evidence(point[0] + shift[0], point[1] + shift[1])
        minus = their_evidence(point[0] - shift[0], point[1] - shift[1])
        assert abs(plus - minus) / (2 * step) < 1e-5
    afresh, _ = fit_kfac(found.name, chosen, (found.inputs, found.targets), found.state.params)
    torch.testing.assert_close(state.curvature, afresh.curvature, **TOLERANCE)


@pytest.mark.parametrize("name", ["laplace_kfac_ggn", "laplace_kfac_fisher"])
def test_scaled_state_is_the_factors_at_another_noise(name: str) -> None:
    """``scaled(k)`` is the KFAC of the noise σ₀/k^(1/e), e = 2 (GGN) or 4 (Fisher): only
    G moves, and log det(kC + δ) is that of the state computed at that noise."""
    found = KfacCase(name, "regression", "all")
    exponent = 4 if "fisher" in name else 2
    noise = 1.6
    likelihood = gaussian(noise)
    other = replace(found.problem, log_likelihood=likelihood.log_prob, output_hessian=likelihood.output_hessian)
    afresh, _ = fit_kfac(name, other, (found.inputs, found.targets), found.state.params)
    scaled = found.state.scaled(noise ** -exponent)
    torch.testing.assert_close(scaled.curvature, afresh.curvature, **TOLERANCE)
    precision = torch.tensor(0.7, dtype=torch.float64)
    torch.testing.assert_close(scaled.log_det(precision), afresh.log_det(precision), **TOLERANCE)


def test_log_det_is_differentiable_and_refuses_a_precision_varying_within_a_tensor() -> None:
    """A (d,) precision constant per tensor gives the scalar's log-determinant and a
    gradient; one that varies within a tensor is refused."""
    found = KfacCase("laplace_kfac_ggn", "classification", "all")
    alpha = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    scalar = found.state.log_det(alpha)
    per_entry = found.state.log_det(alpha * torch.ones(found.problem.dimension, dtype=torch.float64))
    torch.testing.assert_close(scalar, per_entry, rtol=1e-14, atol=0)
    (gradient,) = torch.autograd.grad(scalar, alpha)
    step = 1e-6
    numeric = (found.state.log_det(alpha.detach() + step) - found.state.log_det(alpha.detach() - step)) / (2 * step)
    assert float(gradient) == pytest.approx(float(numeric), rel=1e-6)
    with pytest.raises(StageError, match="one prior precision per tensor"):
        found.state.log_det(torch.linspace(1, 2, found.problem.dimension, dtype=torch.float64))
