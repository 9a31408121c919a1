"""The linearised (GLM) predictive of Gaussian posteriors, and the `prediction` option."""

from __future__ import annotations

import pydantic
import pytest
import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Posterior, Problem, linearized_outputs
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.methods.conjugate import ConjugateLinearSpec
from bayesflow.methods.ekf import EKFBase
from bayesflow.methods.ivon import IVONSpec
from bayesflow.methods.laplace import LaplaceBase
from bayesflow.methods.vi import VIBase
from bayesflow.models import linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from tests.engines.helpers import Regression, exact

GAUSSIAN_SPECS = (LaplaceBase, VIBase, EKFBase, ConjugateLinearSpec, IVONSpec)
GAUSSIAN_ENGINES = [method.name for method in METHODS if method.traits.posterior == "gaussian"]


def sampled_outputs(
    problem: Problem, posterior: Posterior, inputs: Tensor, count: int, seed: int
) -> Tensor:
    """Outputs of the network itself at ``count`` posterior samples drawn under ``seed``."""
    samples = posterior.sample(count, torch.Generator().manual_seed(seed))
    return vmap(problem.forward, in_dims=(0, None))(samples, inputs)


def test_linearized_equals_sampled_for_a_linear_model(regression: Regression) -> None:
    """For a model linear in θ, the linearised predictive is the sampled one, sample by sample."""
    problem, inputs, targets = regression
    target = exact(inputs, targets, 1.0, "posterior")
    posterior = Posterior(mean=target.mean, cov=target.cov)
    linearized = linearized_outputs(
        problem, posterior, inputs, 50, torch.Generator().manual_seed(4)
    )
    sampled = sampled_outputs(problem, posterior, inputs, 50, seed=4)
    assert linearized.shape == (50, inputs.shape[0], 1)
    torch.testing.assert_close(linearized, sampled, rtol=1e-12, atol=1e-12)


def test_linearized_equals_sampled_for_logits_with_a_bias() -> None:
    """The same holds for a multi-output linear classifier with a bias, diagonal posterior."""
    problem = build_problem(linear(4, 3), categorical(), diag_normal(), 10)
    generator = torch.Generator().manual_seed(0)
    mean = problem.init_params(generator)
    posterior = Posterior(mean=mean, var=torch.rand(problem.dimension, generator=generator))
    inputs = torch.randn(7, 4, generator=generator)
    linearized = linearized_outputs(
        problem, posterior, inputs, 20, torch.Generator().manual_seed(1), chunk=6
    )
    sampled = sampled_outputs(problem, posterior, inputs, 20, seed=1)
    torch.testing.assert_close(linearized, sampled, rtol=1e-5, atol=1e-5)


def test_linearized_is_first_order_for_a_network() -> None:
    """For an MLP the linearised outputs differ from the sampled ones at second order."""
    problem = build_problem(
        mlp(2, 3, hidden=[8], activation="tanh").double(), categorical(), diag_normal(), 10
    )
    generator = torch.Generator().manual_seed(0)
    mean = problem.init_params(generator).double()
    inputs = torch.randn(5, 2, generator=generator, dtype=torch.float64)
    gaps = []
    for variance in (1e-2, 1e-4):
        posterior = Posterior(mean=mean, var=torch.full_like(mean, variance))
        linearized = linearized_outputs(
            problem, posterior, inputs, 16, torch.Generator().manual_seed(2)
        )
        sampled = sampled_outputs(problem, posterior, inputs, 16, seed=2)
        gaps.append((linearized - sampled).abs().max().item())
    assert 0 < gaps[1] < gaps[0] / 50  # a hundredfold smaller variance: ~100x smaller gap


def test_linearized_needs_a_gaussian_posterior(regression: Regression) -> None:
    """Sample-based posteriors have no mean to linearise around: the error says so."""
    problem, inputs, _ = regression
    posterior = Posterior(samples=torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="needs a Gaussian posterior.*prediction: sampled"):
        linearized_outputs(problem, posterior, inputs, 4, torch.Generator())


@pytest.mark.parametrize("name", GAUSSIAN_ENGINES)
def test_prediction_option(name: str) -> None:
    """Laplace, VI and EKF specs take ``prediction: sampled | linearized |
    closed_form | linearized_mc`` (sampled default)."""
    spec = METHODS.get(name).spec
    default = spec.model_validate({"engine": name})
    assert isinstance(default, GAUSSIAN_SPECS) and default.prediction == "sampled"
    for value in ("linearized", "closed_form", "linearized_mc"):
        chosen = spec.model_validate({"engine": name, "prediction": value})
        assert isinstance(chosen, GAUSSIAN_SPECS) and chosen.prediction == value
    with pytest.raises(pydantic.ValidationError):
        spec.model_validate({"engine": name, "prediction": "exact"})


def test_every_spec_field_is_described() -> None:
    """Every field of every engine's spec has a description (``bayesflow schema`` shows it)."""
    missing = [
        f"{name}.{field}"
        for name, spec in ((m.name, m.spec) for m in METHODS)
        for field, info in spec.model_fields.items()
        if not info.description
    ]
    assert missing == []
