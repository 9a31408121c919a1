"""The problems of the benchmark, seen by both libraries.

A :class:`Setup` holds one model, likelihood, prior and training set, as bayesflow sees
it (a flat-parameter :class:`~bayesflow.engines.base.Problem`) and as posteriors sees it
(a dict of the module's named tensors, its parameter-tree API, and a log posterior that
returns ``(value, aux)``). Both compute the same per-datum normalised log posterior::

    f(θ; batch) = mean_{i ∈ batch} log p(yᵢ|xᵢ,θ) + log p(θ) / N

with the same torch operations, and :func:`check_agreement` checks the two agree on the
same parameters and batch before anything is timed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from bayesflow.engines.base import Batch, Problem
from bayesflow.likelihoods import Likelihood, build_likelihood
from bayesflow.priors import build_prior
from bayesflow.problem import build_problem

__all__ = ["Setup", "check_agreement", "digits", "minibatch_list", "pima"]

PIMA_FILE = "package:pima_indians_diabetes.csv"


@dataclass
class Setup:
    """One benchmark problem in both libraries' forms.

    Attributes:
        name: ``"pima"`` or ``"digits"``.
        problem: bayesflow's flat-parameter problem.
        module: the torch module (its parameter values are not used).
        likelihood: the observation model.
        prior_variance: the isotropic normal prior's variance.
        inputs, targets: the training data on the device.
        start: the starting parameters (d,), the same for both libraries.
    """

    name: str
    problem: Problem
    module: nn.Module
    likelihood: Likelihood
    prior_variance: float
    inputs: Tensor
    targets: Tensor
    start: Tensor

    @property
    def num_data(self) -> int:
        """N, the number of training points."""
        return self.problem.num_data

    def tree(self, flat: Tensor) -> dict[str, Tensor]:
        """A flat vector (d,) as posteriors' parameter tree: the module's named tensors."""
        sizes = [math.prod(shape) for shape in self.problem.param_shapes]
        return {
            name: piece.reshape(shape).clone()
            for name, piece, shape in zip(
                self.problem.param_names, flat.detach().split(sizes), self.problem.param_shapes
            )
        }

    def forward(self, params: dict[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """posteriors' ``forward``: model outputs of a batch and (empty) aux."""
        outputs = functional_call(self.module, params, (batch[0],))
        return outputs, torch.tensor([])

    def outer_log_likelihood(self, outputs: Tensor, batch: Batch) -> Tensor:
        """posteriors' ``outer_log_likelihood``: Σᵢ log p(yᵢ | outputsᵢ) over the batch."""
        return self.likelihood.log_prob(outputs, batch[1]).sum()

    def log_prior(self, params: dict[str, Tensor]) -> Tensor:
        """log N(θ; 0, σ² I) over the tree, the constant included (as bayesflow's prior)."""
        squares = torch.stack([(value**2).sum() for value in params.values()]).sum()
        dimension = self.problem.dimension
        return -0.5 * squares / self.prior_variance - 0.5 * dimension * math.log(
            2 * math.pi * self.prior_variance
        )

    def log_posterior(self, params: dict[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """posteriors' ``log_posterior``: ``(mean log-lik + log prior / N, outputs)``."""
        outputs = functional_call(self.module, params, (batch[0],))
        log_lik = self.likelihood.log_prob(outputs, batch[1]).mean()
        return log_lik + self.log_prior(params) / self.num_data, outputs

    def flat_log_posterior(self, params: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """The same on a flat vector (bayesflow's function), for posteriors given one tensor."""
        return self.problem.log_posterior(params, batch), torch.tensor([])

    def loss(self, params: dict[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """posteriors.torchopt's loss: the negative log posterior and aux."""
        value, aux = self.log_posterior(params, batch)
        return -value, aux


def _build(
    name: str,
    model: Callable[[], nn.Module],
    likelihood_name: str,
    prior_variance: float,
    inputs: np.ndarray,
    targets: np.ndarray,
    device: str,
) -> Setup:
    likelihood = build_likelihood({"name": likelihood_name})
    prior = build_prior({"name": "diag_normal", "variance": prior_variance})
    torch.manual_seed(0)
    module = model()
    problem = build_problem(module, likelihood, prior, len(targets), device)
    start = problem.init_params(torch.Generator().manual_seed(0)).to(problem.device)
    # build_problem moved the module to the device; posteriors' functions call it too.
    return Setup(
        name,
        problem,
        module,
        likelihood,
        prior_variance,
        torch.as_tensor(inputs, device=device),
        torch.as_tensor(targets, device=device),
        start,
    )


def pima(device: str = "cpu") -> Setup:
    """Bayesian logistic regression on all 768 Pima rows, standardised, prior variance 1."""
    import pandas

    from bayesflow.data import resolve_path

    frame = pandas.read_csv(resolve_path(PIMA_FILE))
    targets = frame.pop("target").to_numpy().astype(np.int64)
    inputs = frame.to_numpy(dtype=np.float32)
    inputs = ((inputs - inputs.mean(0)) / inputs.std(0)).astype(np.float32)
    return _build(
        "pima", lambda: nn.Linear(inputs.shape[1], 1), "bernoulli", 1.0, inputs, targets, device
    )


def digits(device: str = "cpu", hidden: int = 64, prior_variance: float = 0.5) -> Setup:
    """The default workflow's MLP (one hidden layer of 64 ReLU units) on sklearn digits.

    The training half of the digits (898 images, the workflow's split) and its prior
    variance 0.5 (the bundled cold_posterior.yaml says why).
    """
    from bayesflow.data import load_dataset
    from bayesflow.models import build_model

    data = load_dataset({"name": "sklearn_digits", "test_fraction": 0.5, "split_seed": 0})
    config = {"name": "mlp", "hidden": [hidden], "activation": "relu"}
    return _build(
        "digits",
        lambda: build_model(config, data.num_features, 10),
        "categorical",
        prior_variance,
        data.x_train,
        data.y_train,
        device,
    )


def minibatch_list(
    setup: Setup, batch_size: int | None, epochs: int = 1, seed: int = 0
) -> list[Batch]:
    """Shuffled minibatches of ``epochs`` passes, made once so both libraries get the same."""
    from bayesflow.engines.fit import minibatches

    generator = torch.Generator(device=setup.inputs.device).manual_seed(seed)
    return [
        batch
        for _ in range(epochs)
        for batch in minibatches(setup.inputs, setup.targets, batch_size, generator)
    ]


def check_agreement(setup: Setup, batch: Batch) -> dict[str, Any]:
    """Both libraries' log posteriors at the start on ``batch``: they must agree."""
    ours = float(setup.problem.log_posterior(setup.start, batch))
    theirs = float(setup.log_posterior(setup.tree(setup.start), batch)[0])
    if not math.isclose(ours, theirs, rel_tol=1e-4, abs_tol=1e-5):
        raise AssertionError(
            f"{setup.name}: the two log posteriors differ at the same θ and batch "
            f"(bayesflow {ours}, posteriors side {theirs}); the comparison would be unfair"
        )
    return {"bayesflow": ours, "posteriors": theirs}
