"""KFAC of ``nn.Linear`` layers on sequence inputs (batch, positions, features), the
"expand" form (every position a row), against curvlinops' ``KFACLinearOperator`` (the
backend laplace-torch's ``hessian_structure="kron"`` uses; laplace-torch itself takes
(N, C) outputs only, so the per-position model is compared with its backend directly).

The model: Linear → tanh → Linear applied at each of L positions, a categorical over C
classes at every position (each position's label a datum), float64. curvlinops with
``CrossEntropyLoss(reduction="sum")``, ``kfac_approx="expand"`` and
``num_per_example_loss_terms=L``: its input factor is the mean over the N·L rows, its
gradient factor the sum, bayesflow's ``Σ aaᵀ / R`` and ``G``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

from bayesflow.engines.kfac import accumulate_factors, kfac_layers, unpack
from bayesflow.likelihoods import categorical
from bayesflow.llm.likelihood import NextToken
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem

curvlinops = pytest.importorskip("curvlinops")

N, L, FEATURES, HIDDEN, CLASSES = 5, 4, 3, 6, 3


class PerPosition(nn.Module):
    """Linear → tanh → Linear at every position: (N, L, F) → (N, L, C)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(FEATURES, HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, inputs: Tensor) -> Tensor:
        return self.out(torch.tanh(self.hidden(inputs)))


class ClassesSecond(nn.Module):
    """(N, C, L) outputs, the layout ``CrossEntropyLoss`` reads."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, inputs: Tensor) -> Tensor:
        return self.inner(inputs).transpose(1, 2)


@pytest.mark.parametrize(("kind", "fisher_type"), [("ggn", "type-2"), ("fisher", "empirical")])
def test_sequence_linear_factors_match_curvlinops_expand(kind: str, fisher_type: str) -> None:
    torch.manual_seed(0)
    model = PerPosition().double()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(N, L, FEATURES, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, CLASSES, (N, L), generator=generator)
    problem = build_problem(model, categorical(), diag_normal(2.0), N * L)
    # The per-position categorical: outputs (N, L, C), targets (N, L).
    problem = dataclasses.replace(problem, log_likelihood=NextToken().log_prob,
                                  output_hessian=NextToken().output_hessian)
    layers = kfac_layers(problem, "test")
    params = torch.cat([value.detach().reshape(-1) for value in model.parameters()])
    found = unpack(layers, accumulate_factors(problem, layers, params, (inputs, targets), kind))  # type: ignore[arg-type]

    reference = curvlinops.KFACLinearOperator(
        ClassesSecond(model), nn.CrossEntropyLoss(reduction="sum"), list(model.parameters()),
        [(inputs, targets)], fisher_type=fisher_type, kfac_approx="expand",
        num_per_example_loss_terms=L, separate_weight_and_bias=True, check_deterministic=False,
        batch_size_fn=lambda batch: batch.shape[0],
    )
    reference.compute_kronecker_factors()
    for layer, (input_sum, gradient_factor, rows) in zip(layers.layers, found):
        name = f"inner.{layer.name}"
        assert float(rows) == N * L
        expected_inputs = reference._input_covariances[name]
        expected_gradients = reference._gradient_covariances[name]
        assert float(expected_gradients.abs().max()) > 0
        torch.testing.assert_close(input_sum / rows, expected_inputs, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(gradient_factor, expected_gradients, rtol=1e-9, atol=1e-12)
