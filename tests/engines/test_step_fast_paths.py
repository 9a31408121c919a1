"""The per-step fast paths: the normal prior's closed-form gradient and SGHMC's update.

The chains' gradient under a normal prior leaves the prior out of the reverse pass and
adds its gradient in closed form; here with a per-parameter precision (``he_normal``),
one and several chains, shared and per-chain prior weights, against
``vmap(grad_and_value(problem.log_posterior))`` in float64. SGHMC's and SGLD's updates
work in place on the state's tensors (a state given to update is consumed): one step is
checked against the formula, with the same noise draw, from a copy taken before it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.func import grad_and_value, vmap

from bayesflow.engines.base import ChainBatch
from bayesflow.engines.flat import normal_prior
from bayesflow.engines.gradient import chain_gradient
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.models import mlp
from bayesflow.priors import he_normal, laplace
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering

NUM_DATA = 40


def mlp_problem(prior: Any) -> Any:
    """A float64 MLP classifier of 3 inputs and 4 classes."""
    torch.manual_seed(0)
    return build_problem(mlp(3, 4, hidden=[5]).double(), categorical(), prior, NUM_DATA)


@pytest.mark.parametrize("weights", ["shared", "per_chain"])
@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("own", [False, True])
def test_closed_form_prior_gradient_equals_autograd(weights: str, chains: int, own: bool) -> None:
    """Per-parameter precision: the same gradients and values as vmap(grad), float64."""
    problem = mlp_problem(he_normal())
    prior = normal_prior(problem)
    assert prior is not None and prior.precision.unique().numel() > 1  # not isotropic
    generator = torch.Generator().manual_seed(1)
    params = torch.stack([problem.init_params(generator) for _ in range(chains)])
    inputs = torch.randn(chains, 6, 3, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 4, (chains, 6), generator=generator)
    batch: Any = ChainBatch(inputs, targets) if own else (inputs[0], targets[0])
    weight: Any = 0.6 if weights == "shared" else torch.linspace(0.3, 1.2, chains).double()

    grads, values = chain_gradient(problem, weight)(params, batch)

    def f(theta: Tensor, x: Tensor, y: Tensor, c: Any) -> Tensor:
        return problem.log_posterior(theta, (x, y), prior_weight=c)

    dims = (0, 0 if own else None, 0 if own else None, 0 if weights == "per_chain" else None)
    reference = vmap(grad_and_value(f), in_dims=dims)(params, batch[0], batch[1], weight)
    torch.testing.assert_close(grads, reference[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(values, reference[1], rtol=1e-10, atol=1e-12)


def test_only_a_normal_prior_takes_the_closed_form() -> None:
    """A Laplace prior has no closed-form path (it stays in the reverse pass)."""
    assert normal_prior(mlp_problem(laplace(1.0))) is None
    assert normal_prior(mlp_problem(he_normal())) is not None


def one_step(name: str, lr: float, temperature: float, **settings: Any) -> tuple[Any, ...]:
    """One step of sampler ``name`` (2 chains, full batch) from a fresh state: the state's
    values copied before the step, the generator's next (2, d) draw, the batch, the
    state after and the step's aux."""
    problem = mlp_problem(he_normal())
    spec = METHODS.get(name).spec.model_validate(
        {"engine": name, "lr": lr, "batch_size": None, "chains": 2, **settings}
    )
    engine = METHODS.get(name).builder()(problem, Tempering(temperature, NUM_DATA), spec)
    generator = torch.Generator().manual_seed(3)
    state = engine.init(problem.init_params(generator), generator)
    batch = (
        torch.randn(NUM_DATA, 3, generator=generator, dtype=torch.float64),
        torch.randint(0, 4, (NUM_DATA,), generator=generator),
    )
    before = [value.clone() for value in state if isinstance(value, Tensor)]
    copy = torch.Generator().set_state(generator.get_state())
    draw = torch.randn(state.params.shape, generator=copy, dtype=torch.float64)
    new, aux = engine.update(state, batch)
    return problem, before, draw, batch, state, new, aux


def test_sghmc_step_is_the_formula_in_place() -> None:
    """One plain SGHMC step: θ + εm and (1 − εα)m + ε∇f + √(2εα𝒯)·z, z the generator's
    next draw, computed from a copy of the state taken before the step. The step works
    in place: the state given to update is consumed (its tensors are the new state's)."""
    lr, alpha, temperature = 0.05, 0.7, 2.0
    problem, before, draw, batch, state, new, aux = one_step("sghmc", lr, temperature, alpha=alpha)
    params, momenta = before
    grads, values = chain_gradient(problem, Tempering(temperature, NUM_DATA).prior_weight)(params, batch)
    per_datum = temperature / NUM_DATA
    expected = (1 - lr * alpha) * momenta + lr * grads + math.sqrt(2 * lr * alpha * per_datum) * draw
    torch.testing.assert_close(new.params, params + lr * momenta, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(new.momenta, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(aux["log_posterior"], values.mean())
    assert new.params is state.params and new.momenta is state.momenta


def test_sgld_step_is_the_formula_in_place() -> None:
    """One SGLD step: θ + ε∇f + √(2ε𝒯)·z from a copy of the state, in place."""
    lr, temperature = 0.01, 0.5
    problem, before, draw, batch, state, new, aux = one_step("sgld", lr, temperature)
    weight = Tempering(temperature, NUM_DATA).prior_weight
    grads, values = chain_gradient(problem, weight)(before[0], batch)
    expected = before[0] + lr * grads + math.sqrt(2 * lr * temperature / NUM_DATA) * draw
    torch.testing.assert_close(new.params, expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(aux["log_posterior"], values.mean())
    assert new.params is state.params


@pytest.mark.parametrize("name", ["sghmc", "sgld"])
def test_kept_samples_are_copies_of_the_stepped_state(name: str) -> None:
    """keep: all holds each kept state's values, not the state the next steps change."""
    problem = mlp_problem(he_normal())
    spec = METHODS.get(name).spec.model_validate(
        {"engine": name, "lr": 0.01, "batch_size": None, "chains": 2, "keep": "all"}
    )
    engine = METHODS.get(name).builder()(problem, Tempering(1.0, NUM_DATA), spec)
    generator = torch.Generator().manual_seed(4)
    state = engine.init(problem.init_params(generator), generator)
    batch = (torch.randn(NUM_DATA, 3, dtype=torch.float64), torch.randint(0, 4, (NUM_DATA,)))
    seen = []
    for _ in range(3):
        state, _ = engine.update(state, batch)
        seen.append(state.params.clone())
    samples = engine.posterior(state).samples.view(2, 3, -1)
    assert torch.equal(samples, torch.stack(seen, 1))


@pytest.mark.parametrize("name", ["sghmc", "sgld"])
def test_starting_points_given_to_init_are_copied(name: str) -> None:
    """K starting points (K, d) handed to init stay as they were: the engine steps its own
    copy in place."""
    problem = mlp_problem(he_normal())
    spec = METHODS.get(name).spec.model_validate(
        {"engine": name, "lr": 0.01, "batch_size": None, "chains": 2}
    )
    engine = METHODS.get(name).builder()(problem, Tempering(1.0, NUM_DATA), spec)
    generator = torch.Generator().manual_seed(7)
    starts = torch.stack([problem.init_params(generator) for _ in range(2)])
    kept = starts.clone()
    state = engine.init(starts, generator)
    batch = (torch.randn(NUM_DATA, 3, dtype=torch.float64), torch.randint(0, 4, (NUM_DATA,)))
    state, _ = engine.update(state, batch)
    assert torch.equal(starts, kept) and not torch.equal(state.params, kept)


def test_scratch_draw_is_the_new_tensor_draw() -> None:
    """Drawn into a scratch buffer, the noise is the numbers a new tensor would hold."""
    from bayesflow.engines.sgmcmc import standard_normal

    like = torch.zeros(3, 7)
    fresh = standard_normal((3, 7), like, torch.Generator().manual_seed(5))
    scratch = torch.full((3, 7), 9.0)
    drawn = standard_normal((3, 7), like, torch.Generator().manual_seed(5), scratch)
    assert drawn is scratch and torch.equal(drawn, fresh)


def test_compact_quadratic_is_the_weighted_sum_of_squares() -> None:
    """A compact prior's Σ w θ² by a batched dot product equals the dense weights' mv."""
    from bayesflow.engines.gradient import quadratic

    params = torch.randn(3, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    compact = torch.tensor([0.7], dtype=torch.float64).expand(11)
    assert compact.stride(0) == 0
    dense = torch.full((11,), 0.7, dtype=torch.float64)
    torch.testing.assert_close(quadratic(params, compact), torch.mv(params.square(), dense))
    torch.testing.assert_close(quadratic(params, dense), torch.mv(params.square(), dense))


@pytest.mark.parametrize("per_datum", [0.0, 0.05])
@pytest.mark.parametrize("stick_the_landing", [True, False])
@pytest.mark.parametrize("draws", [1, 3])
def test_mean_field_gradient_equals_autograd(
    per_datum: float, stick_the_landing: bool, draws: int
) -> None:
    """vi_diag's closed-form chain rule gives autograd's loss and gradient through
    :func:`~bayesflow.methods.vi.entropy`, float64."""
    from bayesflow.methods.vi import DIAGONAL, diagonal_gradient, entropy

    problem = mlp_problem(he_normal())
    generator = torch.Generator().manual_seed(2)
    mean = problem.init_params(generator)
    scale = -1.0 + 0.3 * torch.randn(mean.shape, generator=generator, dtype=torch.float64)
    noise = torch.randn(draws, mean.shape[0], generator=generator, dtype=torch.float64)
    batch = (
        torch.randn(9, 3, generator=generator, dtype=torch.float64),
        torch.randint(0, 4, (9,), generator=generator),
    )
    gradient = chain_gradient(problem, 1.0)

    grads, loss = diagonal_gradient(
        gradient, torch.stack([mean, scale]), batch, noise, per_datum, stick_the_landing
    )

    leaves = (mean.clone().requires_grad_(True), scale.clone().requires_grad_(True))
    samples = leaves[0] + DIAGONAL.times_factor(leaves[1], noise)
    expected = torch.stack([problem.log_posterior(row, batch) for row in samples]).mean()
    estimate = entropy(DIAGONAL, leaves[0], leaves[1], samples, stick_the_landing)
    reference = -(expected + per_datum * estimate)
    reference_grads = torch.autograd.grad(reference, leaves)
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grads, torch.stack(reference_grads), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chains", [1, 3])
def test_regression_layer_against_inputs_with_ones(chains: int) -> None:
    """A first layer of one output reads [w, b] against [x, 1] (whole vector or a slice
    of it); the cached [x, 1] is rebuilt when x changes in place."""
    from torch import nn

    from bayesflow.likelihoods import bernoulli, gaussian
    from bayesflow.priors import diag_normal

    torch.manual_seed(0)
    cases = [
        (nn.Linear(3, 1), bernoulli()),
        (nn.Sequential(nn.Linear(3, 1), nn.Tanh(), nn.Linear(1, 1)), gaussian(0.5)),
    ]
    for model, likelihood in cases:
        problem = build_problem(model.double(), likelihood, diag_normal(1.0), NUM_DATA)
        generator = torch.Generator().manual_seed(4)
        params = torch.stack([problem.init_params(generator) for _ in range(chains)])
        inputs = torch.randn(8, 3, generator=generator, dtype=torch.float64)
        targets = torch.randint(0, 2, (8,), generator=generator)
        gradient = chain_gradient(problem, 1.0)
        for _ in range(2):  # the second time after inputs changed in place
            grads, values = gradient(params, (inputs, targets))
            reference = vmap(grad_and_value(problem.log_posterior), in_dims=(0, None))(
                params, (inputs, targets)
            )
            torch.testing.assert_close(grads, reference[0], rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(values, reference[1], rtol=1e-10, atol=1e-12)
            inputs.mul_(-2.0)


def test_constant_adam_steps_like_torchopt() -> None:
    """ConstantAdam's steps equal torchopt's adam at the same rate, float64, 30 steps (to
    1e-4: torchopt takes the bias corrections 1 − β^t in float32, its step count being an
    integer tensor; ours are Python floats)."""
    import torchopt

    from bayesflow.engines.adam import constant_adam
    from bayesflow.methods.base import OptimizerSpec

    adam = constant_adam(OptimizerSpec(name="adam", lr=0.05))
    assert adam is not None
    generator = torch.Generator().manual_seed(5)
    ours = theirs = torch.randn(2, 7, generator=generator, dtype=torch.float64)
    reference = torchopt.adam(0.05)
    state, reference_state = adam.init(ours), reference.init((theirs,))
    for _ in range(30):
        grads = torch.randn(2, 7, generator=generator, dtype=torch.float64)
        ours, state = adam.step(ours, grads, state)
        updates, reference_state = reference.update(
            (grads,), reference_state, params=(theirs,), inplace=False
        )
        (theirs,) = torchopt.apply_updates((theirs,), updates, inplace=False)
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    assert state.steps == 30 and (ours - torch.zeros_like(ours)).abs().max() > 0


@pytest.mark.parametrize(
    "fields",
    [{"name": "adamw"}, {"weight_decay": 0.1}, {"schedule": {"kind": "cosine"}}, {"name": "sgd"}],
)
def test_other_optimisers_stay_with_torchopt(fields: dict[str, Any]) -> None:
    """Only Adam with no weight decay at a constant rate takes the hand-written step."""
    from bayesflow.engines.adam import constant_adam
    from bayesflow.methods.base import OptimizerSpec

    assert constant_adam(OptimizerSpec.model_validate({"lr": 0.1, **fields})) is None
