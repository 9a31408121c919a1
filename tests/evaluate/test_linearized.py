"""The evaluate entry points under the closed-form and Monte Carlo GLM predictives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesflow.engines.base import Posterior
from bayesflow.engines.linearized import functional_moments, probit_probabilities
from bayesflow.evaluate import evaluate_full
from bayesflow.evaluate.metrics import classification_metrics
from bayesflow.evaluate.uncertainty import entropy
from bayesflow.likelihoods import bernoulli, categorical
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem


def _case(outputs: int = 3) -> tuple[object, Posterior, torch.Tensor, torch.Tensor, torch.Tensor]:
    likelihood = categorical() if outputs > 1 else bernoulli()
    problem = build_problem(mlp(4, outputs, hidden=[8], activation="tanh").double(), likelihood,
                            diag_normal(), 20)
    generator = torch.Generator().manual_seed(0)
    mean = problem.init_params(generator)
    var = 0.05 * torch.rand(problem.dimension, generator=generator, dtype=torch.float64)
    inputs = torch.randn(30, 4, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, max(outputs, 2), (30,), generator=generator)
    ood = 4 + torch.randn(10, 4, generator=generator, dtype=torch.float64)
    return problem, Posterior(mean=mean, var=var), inputs, labels, ood


@pytest.mark.parametrize("outputs", [3, 1])
def test_probit_evaluation_scores_the_probit_predictive(outputs: int) -> None:
    """`closed_form`: the headline metrics of the probit probabilities, TU their
    entropy, the OOD AUROC of TU; no `_single` metrics and no aleatoric/epistemic split."""
    problem, posterior, inputs, labels, ood = _case(outputs)
    likelihood = categorical() if outputs > 1 else bernoulli()
    result = evaluate_full(problem, likelihood, posterior, inputs, labels, 10, torch.Generator(),
                           x_ood=ood, prediction="closed_form")
    expected = probit_probabilities(functional_moments(problem, posterior, inputs), likelihood)
    assert result.metrics.keys() == {*classification_metrics(expected, labels), "ood_auroc_total"}
    for name, value in classification_metrics(expected.numpy(), labels).items():
        assert result.metrics[name] == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(result.arrays["uncertainty_total"], entropy(expected), rtol=1e-12)
    assert "uncertainty_epistemic" not in result.arrays
    assert "probit" in result.conventions["predictive"]


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
def test_monte_carlo_evaluation_keeps_every_metric() -> None:
    """`linearized_mc` has per-sample probabilities: `_single` metrics, the decomposition,
    and a predictive close to the probit one (the two approximate the same integral)."""
    problem, posterior, inputs, labels, ood = _case()
    draws = evaluate_full(problem, categorical(), posterior, inputs, labels, 4000,
                          torch.Generator().manual_seed(1), x_ood=ood, prediction="linearized_mc")
    probit = evaluate_full(problem, categorical(), posterior, inputs, labels, 10,
                           torch.Generator(), prediction="closed_form")
    assert {"test_nll_single", "ood_auroc_epistemic"} <= draws.metrics.keys()
    assert draws.arrays["uncertainty_epistemic"].min() >= 0
    # The probit approximation of E[softmax] is accurate to a few hundredths for these
    # small logit variances (Daxberger et al. 2021, Fig. 2 compare probit and MC).
    gap = np.abs(draws.arrays["probabilities"] - probit.arrays["probabilities"]).max()
    assert gap < 0.03


def test_a_point_estimate_predicts_with_its_one_vector() -> None:
    """A zero-variance posterior (T = 0) gives the sampled metrics under every prediction."""
    problem, posterior, inputs, labels, _ = _case()
    point = Posterior(mean=posterior.mean, var=torch.zeros_like(posterior.var))
    sampled = evaluate_full(problem, categorical(), point, inputs, labels, 5, torch.Generator())
    for prediction in ("closed_form", "linearized_mc"):
        result = evaluate_full(problem, categorical(), point, inputs, labels, 5, torch.Generator(),
                               prediction=prediction)
        assert result.metrics == sampled.metrics
