"""Independent chains: own minibatch orders, the shared option, one reverse pass, seeds.

Each parallel chain or ensemble member has its own start, noise and minibatch order; the
K chains' gradients come from one reverse pass over the sum of their log posteriors; a
seed fixes every draw in the order docs/design.md ("Seeds and streams") states.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.func import grad_and_value, vmap

from bayesflow.engines.base import ChainBatch, Engine, Problem
from bayesflow.engines.fit import chain_orders, fit, minibatches
from bayesflow.engines.gradient import chain_gradient
from bayesflow.engines.sgmcmc import chain_starts
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import NUM_DATA, Regression
from tests.numerics import reordered

POINTS, BATCH, CHAINS = 12, 4, 3


def build(name: str, problem: Problem, temperature: float = 0.0, **config: Any) -> Engine:
    """Engine ``name`` from ``config`` at ``temperature`` under the posterior convention."""
    spec = METHODS.get(name).spec.model_validate({"engine": name, **config})
    return METHODS.get(name).builder()(problem, Tempering(temperature, problem.num_data), spec)


def revealing_problem() -> Problem:
    """f(θ; batch) = θ · mean(x_batch), no prior: a gradient step reveals the batch's mean."""
    return Problem(
        forward=lambda params, inputs: inputs * params,
        log_likelihood=lambda outputs, targets: outputs.squeeze(-1),
        output_hessian=lambda outputs: torch.zeros(outputs.shape[0], 1, 1),
        log_prior=lambda params: params.new_zeros(()),
        prior_precision=torch.zeros(1),
        num_data=POINTS,
        dimension=1,
        param_names=("theta",),
        param_shapes=((1,),),
        init_params=lambda generator: torch.randn(1, generator=generator, dtype=torch.float64),
    )


def batch_means(minibatches: str, epochs: int = 2) -> Tensor:
    """(K, steps) the batch mean each chain's T = 0 SGLD step (lr 1) followed."""
    inputs = torch.arange(POINTS, dtype=torch.float64).unsqueeze(-1)
    engine = build(
        "sgld", revealing_problem(), lr=1.0, epochs=epochs, batch_size=BATCH,
        chains=CHAINS, minibatches=minibatches,
    )
    result = fit(engine, torch.zeros(1, dtype=torch.float64), inputs, inputs.squeeze(-1),
                 torch.Generator().manual_seed(0))
    assert result.posterior.samples is not None
    path = result.posterior.samples.reshape(CHAINS, -1)
    starts = chain_starts(revealing_problem(), torch.zeros(1, dtype=torch.float64), CHAINS,
                          torch.Generator().manual_seed(0)).reshape(CHAINS, 1)
    return torch.diff(torch.cat([starts, path], 1), dim=1)


def test_independent_chains_follow_their_own_batches() -> None:
    """Independent: the chains' steps differ, yet each chain sees every point once per epoch."""
    steps = batch_means("independent")
    assert not torch.equal(steps[0], steps[1]) and not torch.equal(steps[1], steps[2])
    per_epoch = steps.reshape(CHAINS, 2, POINTS // BATCH).sum(-1)
    # Each epoch's batch means of a partition into equal batches sum to (N/B)·mean(x).
    expected = POINTS / BATCH * (POINTS - 1) / 2
    torch.testing.assert_close(per_epoch, torch.full_like(per_epoch, expected))


def test_shared_chains_follow_the_same_batches() -> None:
    """Shared: every chain takes the same steps (the same batches)."""
    steps = batch_means("shared")
    torch.testing.assert_close(steps, steps[:1].expand(CHAINS, -1), rtol=0, atol=1e-12)


def test_each_chain_batch_row_is_its_own_permutation() -> None:
    """K streams: ChainBatch (K, B, ...) per step; each row of an epoch is a permutation."""
    inputs = torch.arange(POINTS).unsqueeze(-1)
    generator = torch.Generator().manual_seed(0)
    batches = list(minibatches(inputs, inputs.squeeze(-1), BATCH, generator, streams=CHAINS))
    assert all(isinstance(batch, ChainBatch) for batch in batches)
    assert batches[0].inputs.shape == (CHAINS, BATCH, 1)
    assert batches[0].targets.shape == (CHAINS, BATCH)
    seen = torch.cat([batch.targets for batch in batches], 1)
    assert torch.equal(seen.sort(1).values, torch.arange(POINTS).expand(CHAINS, -1))
    assert len({tuple(row.tolist()) for row in seen}) == CHAINS
    orders = chain_orders(POINTS, CHAINS, torch.Generator().manual_seed(0)).full()
    assert torch.equal(seen, orders)


def test_one_stream_is_the_single_permutation() -> None:
    """One stream is ``randperm(N)`` per epoch, as before independent streams existed."""
    inputs = torch.arange(POINTS).unsqueeze(-1)
    batches = list(minibatches(inputs, inputs.squeeze(-1), BATCH, torch.Generator().manual_seed(5)))
    order = torch.randperm(POINTS, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.cat([targets for _, targets in batches]), order)


def test_shared_chains_are_single_chain_fits(regression: Regression) -> None:
    """``minibatches: shared`` at T = 0: chain k is the one-chain fit from chain k's start on
    the generator the K-chain fit shuffles with (the single stream of earlier versions).

    The same steps, not the same bits: the K-chain gradient is one (K, B) product, the
    one-chain gradient a (1, B) one, and kernels may sum them in another order (on an Intel
    Xeon they differ by 2.8e-17), so the tolerance is that of a reordered sum of a batch's
    terms over every step of the fit."""
    problem, inputs, targets = regression
    config = {"lr": 0.05, "alpha": 1.0, "epochs": 5, "batch_size": 50, "keep": "last"}
    start = problem.init_params(torch.Generator().manual_seed(1))
    many = build("sghmc", problem, chains=CHAINS, minibatches="shared", **config)
    samples = fit(many, start, inputs, targets, torch.Generator().manual_seed(3)).posterior.samples
    replay = torch.Generator().manual_seed(3)
    starts = chain_starts(problem, start, CHAINS, replay)
    one = build("sghmc", problem, chains=1, **config)
    steps = config["epochs"] * NUM_DATA // config["batch_size"]
    tolerance = reordered(torch.float64, config["batch_size"], steps, scale=float(start.abs().max()))
    assert samples is not None
    for chain in range(CHAINS):
        generator = torch.Generator()
        generator.set_state(replay.get_state())
        alone = fit(one, starts[chain], inputs, targets, generator).posterior.samples
        torch.testing.assert_close(samples[chain : chain + 1], alone, **tolerance)


def float64_problem() -> Problem:
    """The conformance MLP (2 → 5 → 3, tanh) in float64."""
    model = mlp(2, 3, hidden=[5], activation="tanh").double()
    return build_problem(model, categorical(), diag_normal(1.0), 24)


@pytest.mark.parametrize("weights", ["shared", "per_chain"])
@pytest.mark.parametrize("batches", ["own", "shared", "one_chain"])
def test_summed_gradient_equals_the_vmap_gradient(weights: str, batches: str) -> None:
    """One reverse pass over Σ_k f_k gives each chain's ∇f_k, as vmap(grad) does (float64)."""
    problem = float64_problem()
    count = 1 if batches == "one_chain" else 4
    generator = torch.Generator().manual_seed(0)
    params = torch.stack([problem.init_params(generator) for _ in range(count)])
    inputs = torch.randn(count, 6, 2, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 3, (count, 6), generator=generator)
    weight: Any = 0.7
    if weights == "per_chain":
        weight = torch.linspace(0.2, 1.0, count, dtype=torch.float64)
    gradient = chain_gradient(problem, weight)

    def f(theta: Tensor, x: Tensor, y: Tensor, c: Any) -> Tensor:
        return problem.log_posterior(theta, (x, y), prior_weight=c)

    weight_axis = None if weights == "shared" else 0
    if batches == "own":
        grads, values = gradient(params, ChainBatch(inputs, targets))
        expected = vmap(grad_and_value(f), in_dims=(0, 0, 0, weight_axis))(
            params, inputs, targets, weight
        )
    else:
        grads, values = gradient(params, (inputs[0], targets[0]))
        expected = vmap(grad_and_value(f), in_dims=(0, None, None, weight_axis))(
            params, inputs[0], targets[0], weight
        )
    assert grads.shape == params.shape and values.shape == (count,)
    torch.testing.assert_close(grads, expected[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(values, expected[1], rtol=0, atol=1e-6)


def test_deep_ensemble_members_are_map_fits_on_their_own_orders(regression: Regression) -> None:
    """Member k of an independent ensemble is ``map`` from member k's start fed member k's
    order: row k of ``chain_orders(N, K, generator).full()`` drawn each epoch after the starts."""
    problem, inputs, targets = regression
    optimizer = {"name": "adam", "lr": 0.05}
    config = {"epochs": 4, "batch_size": 64, "optimizer": optimizer}
    start = problem.init_params(torch.Generator().manual_seed(2))
    ensemble = build("deep_ensemble", problem, 1.0, members=CHAINS, **config)
    generator = torch.Generator().manual_seed(1)
    members = fit(ensemble, start, inputs, targets, generator).posterior.samples
    assert members is not None
    replay = torch.Generator().manual_seed(1)
    starts = chain_starts(problem, start, CHAINS, replay)
    orders = [chain_orders(NUM_DATA, CHAINS, replay).full() for _ in range(4)]
    single = build("map", problem, 1.0, **config)
    for member in range(CHAINS):
        state = single.init(starts[member], torch.Generator())
        for order in orders:
            for first in range(0, NUM_DATA, 64):
                index = order[member, first : first + 64]
                state, _ = single.update(state, (inputs[index], targets[index]))
        torch.testing.assert_close(members[member], state.params, rtol=1e-10, atol=1e-12)
    assert torch.unique(members, dim=0).shape[0] == CHAINS


def test_initial_weights_and_draws_in_plain_torch() -> None:
    """The recipe of docs/design.md: a seed's starts, momenta and first orders in plain torch."""
    seed, temperature = 11, 0.5
    problem = build_problem(mlp(2, 3, hidden=[5], activation="tanh"), categorical(),
                            diag_normal(1.0), POINTS)
    inputs = torch.randn(POINTS, 2, generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 3, (POINTS,), generator=torch.Generator().manual_seed(0))
    # bayesflow, as the fit stage runs it: one generator for the start, the chains and the fit.
    engine = build("sghmc", problem, temperature, lr=0.01, epochs=1, batch_size=BATCH,
                   chains=CHAINS, keep="last")
    generator = torch.Generator().manual_seed(seed)
    state = engine.init(problem.init_params(generator), generator)
    first_batch = next(iter(minibatches(inputs, targets, BATCH, generator, engine.streams)))

    # Plain torch: each start reseeds torch with one integer from the generator, then
    # constructs the model; then the momenta; then the epoch's orders.
    plain = torch.Generator().manual_seed(seed)
    starts = []
    for _ in range(CHAINS):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=plain)))
        model = nn.Sequential(nn.Linear(2, 5), nn.Tanh(), nn.Linear(5, 3))
        starts.append(torch.cat([value.detach().reshape(-1) for value in model.parameters()]))
    momenta = torch.randn((CHAINS, problem.dimension), generator=plain) * math.sqrt(
        temperature / POINTS
    )
    orders = chain_orders(POINTS, CHAINS, plain).full()

    assert torch.equal(state.params, torch.stack(starts))
    torch.testing.assert_close(state.momenta, momenta, rtol=1e-6, atol=0)
    assert torch.equal(first_batch.targets, targets[orders[:, :BATCH]])


@pytest.mark.slow  # torch.compile takes 5-45 s on the 2-core machines
def test_compiled_gradient_equals_the_eager_gradient() -> None:
    """``compile: true`` gives the eager gradients, for own and shared batches (float64)."""
    problem = float64_problem()
    generator = torch.Generator().manual_seed(0)
    params = torch.stack([problem.init_params(generator) for _ in range(4)])
    inputs = torch.randn(4, 6, 2, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 3, (4, 6), generator=generator)
    eager, compiled = (chain_gradient(problem, 0.7, compile=flag) for flag in (False, True))
    for batch in (ChainBatch(inputs, targets), (inputs[0], targets[0])):
        for ours, theirs in zip(compiled(params, batch), eager(params, batch)):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)


@pytest.mark.slow  # torch.compile
def test_compile_option_reaches_the_sampler() -> None:
    """``sghmc`` with ``compile: true`` takes the eager sampler's steps (own batches)."""
    problem = float64_problem()
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(24, 2, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 3, (24,), generator=generator)
    config = {"lr": 0.05, "epochs": 2, "batch_size": 8, "chains": CHAINS, "keep": "last"}
    start = problem.init_params(torch.Generator().manual_seed(1))
    samples = [
        fit(build("sghmc", problem, 1.0, compile=flag, **config), start, inputs, targets,
            torch.Generator().manual_seed(2)).posterior.samples
        for flag in (False, True)
    ]
    torch.testing.assert_close(samples[1], samples[0], rtol=0, atol=1e-10)
