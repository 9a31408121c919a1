"""KFAC Laplace (Laplace-LoRA) on multiple-choice questions against laplace-torch 0.3.

The reference is ``laplace.Laplace(wrapper, "classification", subset_of_weights="all",
hessian_structure="kron")`` with the curvlinops backends (``CurvlinopsGGN`` for
``laplace_kfac_ggn``, ``CurvlinopsEF`` for ``laplace_kfac_fisher``), where the wrapper is
the same tiny config-built Llama returning the choices' label logits at the last position,
only the trainable tensors (peft's LoRA adapters, or the last layer's attention projections)
with ``requires_grad``. laplace-torch reads the prompts unpadded, in batches of equal length
(its input factor is a mean over a batch's positions rescaled by batch / N); bayesflow reads
them left-padded in one batch. Conventions as ``tests/engines/test_laplace_kfac.py``:
laplace-torch tempers the likelihood only, so bayesflow's ``posterior`` convention at T is
laplace-torch at T with the prior precision δ / T.

Tolerances: float32 (the problem's choice logits are float32), the sums of
:mod:`tests.numerics` in another order: the factors sum over every real position of every
prompt, the variances and log determinants over a block's eigenvalues.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from bayesflow.engines.base import Problem
from bayesflow.engines.evidence import mode_fit
from bayesflow.engines.evidence_prior import choose_prior
from bayesflow.engines.fit import fit
from bayesflow.engines.kfac import Layers, accumulate_factors, kronecker_log_det, unpack
from bayesflow.engines.linearized import functional_moments, probit_probabilities
from bayesflow.llm import build_causal_lm
from bayesflow.llm.choices import build_choice_problem
from bayesflow.llm.kfac import choice_kfac_layers
from bayesflow.methods import METHODS
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from tests.llm.conftest import tiny
from tests.numerics import reordered

laplace = pytest.importorskip("laplace")
curvature = pytest.importorskip("laplace.curvature")

pytestmark = pytest.mark.slow  # laplace-torch's curvlinops passes: 2-6 s a test on the shared CPU

NAMES = ["laplace_kfac_ggn", "laplace_kfac_fisher"]
BACKENDS = {"laplace_kfac_ggn": "CurvlinopsGGN", "laplace_kfac_fisher": "CurvlinopsEF"}
LABELS = [65, 66, 67, 68]
LENGTHS = [5, 9, 9, 12, 7, 5]  # two pairs of equal length: laplace-torch batches them
PRIOR_VARIANCE = 0.5
LAST_LAYER = {"parameters": ["model.layers.1.self_attn.*"]}  # q, k, v, o projections: 1,024


@dataclass
class Case:
    """A tiny Llama asked six questions of different lengths, at parameters off the LoRA
    start (B ≠ 0), which are also written into the model for laplace-torch."""

    model: nn.Module
    names: tuple[str, ...]
    prompts: list[Tensor]
    answers: Tensor
    inputs: Tensor
    params: Tensor

    def problem(self, prior_variance: float = PRIOR_VARIANCE) -> Problem:
        return build_choice_problem(self.model, self.names, diag_normal(prior_variance), len(self.prompts), LABELS)


@pytest.fixture(scope="module", params=["lora", "last_layer"])
def case(request: pytest.FixtureRequest) -> Case:
    torch.manual_seed(0)
    config = tiny("llama", context=128)
    if request.param == "last_layer":
        config["trainable"] = LAST_LAYER
    model, names = build_causal_lm(config)
    model.eval()
    generator = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 256, (length,), generator=generator) for length in LENGTHS]
    inputs = torch.full((len(prompts), max(LENGTHS)), -1)
    for row, prompt in enumerate(prompts):
        inputs[row, inputs.shape[1] - len(prompt) :] = prompt
    problem = build_choice_problem(model, names, diag_normal(PRIOR_VARIANCE), len(prompts), LABELS)
    start = problem.init_params(torch.Generator().manual_seed(0))
    params = start + 0.3 * torch.randn(start.shape, generator=torch.Generator().manual_seed(3))
    values = dict(model.named_parameters())
    sizes = [math.prod(shape) for shape in problem.param_shapes]
    with torch.no_grad():
        for name, piece, shape in zip(names, params.split(sizes), problem.param_shapes):
            values[name].copy_(piece.reshape(shape))
    return Case(model, names, prompts, torch.tensor([0, 2, 1, 3, 2, 1]), inputs, params)


class ChoiceLogits(nn.Module):
    """laplace-torch's model: unpadded prompts (n, L) in, the label logits (n, C) out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        return self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1, LABELS]  # type: ignore[no-any-return]


class SameLength:
    """The questions as laplace-torch's loader: ``dataset`` (N) and batches of equal length."""

    def __init__(self, prompts: list[Tensor], answers: Tensor) -> None:
        self.dataset = list(zip(prompts, answers))

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for length in sorted({len(prompt) for prompt, _ in self.dataset}):
            group = [(prompt, answer) for prompt, answer in self.dataset if len(prompt) == length]
            yield torch.stack([prompt for prompt, _ in group]), torch.stack([answer for _, answer in group])


def ours(name: str, case: Case, temperature: float = 1.0, convention: str = "posterior",
         prior_variance: float = PRIOR_VARIANCE) -> tuple[Problem, Any]:
    """The problem and bayesflow's registered KFAC fit over the padded batch."""
    problem = case.problem(prior_variance)
    spec = METHODS.get(name).spec.model_validate({"engine": name, "batch_size": None})
    tempering = Tempering(temperature, len(case.prompts), convention)  # type: ignore[arg-type]
    engine = METHODS.get(name).builder()(problem, tempering, spec)
    return problem, fit(engine, case.params, case.inputs, case.answers, torch.Generator().manual_seed(0))


def theirs(name: str, case: Case, temperature: float = 1.0, convention: str = "posterior",
           prior_variance: float = PRIOR_VARIANCE) -> Any:
    """laplace-torch's Kronecker Laplace of the same questions, unpadded."""
    prior = 1 / prior_variance if convention == "likelihood" else 1 / (prior_variance * temperature)
    approximation = laplace.Laplace(
        ChoiceLogits(case.model), "classification", subset_of_weights="all", hessian_structure="kron",
        prior_precision=prior, temperature=temperature, backend=getattr(curvature, BACKENDS[name]),
    )
    approximation.fit(SameLength(case.prompts, case.answers))
    return approximation


def close(found: Tensor, expected: Tensor, terms: int) -> None:
    scale = float(expected.abs().max())
    torch.testing.assert_close(found, expected.to(found), **reordered(torch.float32, terms, scale=scale))


@pytest.mark.parametrize("name", NAMES)
def test_a_padded_batchs_factors_are_the_sum_of_each_prompt_alone(name: str, case: Case) -> None:
    """Padding enters neither factor: the packed Σ aaᵀ, G and R of the left-padded batch are
    the sums of each prompt's own, unpadded; with the padded rows counted they are not."""
    problem = case.problem()
    layers = choice_kfac_layers(problem)
    kind = "ggn" if name == "laplace_kfac_ggn" else "fisher"
    batch = accumulate_factors(problem, layers, case.params, (case.inputs, case.answers), kind)
    alone = sum(accumulate_factors(problem, layers, case.params, (prompt[None], answer[None]), kind)
                for prompt, answer in zip(case.prompts, case.answers))
    assert isinstance(alone, Tensor)
    close(batch, alone, sum(LENGTHS))
    padded_rows = Layers(layers.forward, layers.layers)  # every position a row, the padding too
    counted = accumulate_factors(problem, padded_rows, case.params, (case.inputs, case.answers), kind)
    assert not torch.allclose(counted, alone, rtol=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_kronecker_factors_equal_laplace_torch(name: str, case: Case) -> None:
    """Every layer's input factor A = Σ aaᵀ / R and gradient factor G are laplace-torch's
    (its [G, A] per layer, in the model's module order); R is the number of questions."""
    problem, result = ours(name, case)
    factors = unpack(choice_kfac_layers(problem), result.state.curvature)
    their_factors = theirs(name, case).H_facs.kfacs
    assert len(factors) == len(their_factors) == 4  # q and v's A and B, or q, k, v and o
    for (input_sum, gradient, rows), (their_gradient, their_inputs) in zip(factors, their_factors):
        assert float(rows) == len(case.prompts)
        close(input_sum / rows, their_inputs, sum(LENGTHS))
        close(gradient, their_gradient, sum(LENGTHS))


@pytest.mark.parametrize(("temperature", "convention"), [(1.0, "posterior"), (0.5, "posterior"), (0.5, "likelihood")])
@pytest.mark.parametrize("name", NAMES)
def test_marginal_variances_and_log_determinant_equal_laplace_torch(
    name: str, case: Case, temperature: float, convention: str
) -> None:
    """The posterior's marginal variances are the diagonal of laplace-torch's covariance, and
    log det of the tempered precision its ``log_det_posterior_precision``, at T = 1 and
    T = 0.5 under both conventions."""
    problem, result = ours(name, case, temperature, convention)
    reference = theirs(name, case, temperature, convention)
    covariance = reference.posterior_precision.to_matrix(exponent=-1)
    close(result.posterior.var, covariance.diagonal(), problem.dimension)
    prior_weight = Tempering(temperature, len(case.prompts), convention).prior_weight  # type: ignore[arg-type]
    layers = choice_kfac_layers(problem)
    log_det = kronecker_log_det(layers, result.state.curvature)(prior_weight * problem.prior_precision)
    tempered = log_det - problem.dimension * math.log(temperature)
    close(tempered, reference.log_det_posterior_precision.double(), problem.dimension)


@pytest.mark.parametrize("precision", [0.3, 20.0])
@pytest.mark.parametrize("name", NAMES)
def test_log_evidence_equals_laplace_torch(name: str, case: Case, precision: float) -> None:
    """The logged ``log_evidence`` (T does not enter) is laplace-torch's kron
    ``log_marginal_likelihood`` at two prior precisions."""
    problem, result = ours(name, case, prior_variance=1 / precision)
    mode = mode_fit(problem, result.state.params, case.inputs, case.answers)
    _, _, metrics = choose_prior(problem, result.state, mode, curvature_name=METHODS.get(name).traits.curvature or "")
    expected = theirs(name, case, prior_variance=1 / precision).log_marginal_likelihood(torch.tensor(precision))
    close(torch.tensor(metrics["log_evidence"]), expected.double(), problem.dimension)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_probit_predictive_equals_laplace_torch(case: Case, temperature: float) -> None:
    """The linearised predictive's probit probabilities (``functional_moments`` of the
    Kronecker posterior, over the padded batch) are laplace-torch's ``pred_type="glm"``,
    ``link_approx="probit"`` on each prompt alone, and differ from the mode's softmax by
    far more than the tolerance (a wide prior, so the posterior moves them)."""
    name, wide = "laplace_kfac_ggn", 50.0
    problem, result = ours(name, case, temperature, prior_variance=wide)
    found = probit_probabilities(functional_moments(problem, result.posterior, case.inputs), problem.observation)
    reference = theirs(name, case, temperature, prior_variance=wide)
    with torch.no_grad():
        expected = torch.cat([reference(prompt[None], pred_type="glm", link_approx="probit")
                              for prompt in case.prompts])
        mode = problem.forward(case.params, case.inputs).softmax(-1).double()
    tolerance = reordered(torch.float32, problem.dimension)
    torch.testing.assert_close(found, expected.double(), **tolerance)
    assert float((found - mode).abs().max()) > 100 * tolerance["rtol"]
