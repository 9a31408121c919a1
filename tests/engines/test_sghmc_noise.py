"""SGHMC's honest-cold-chain options: ``discretisation: matched`` and ``gradient_noise:
estimated`` (docs/cold-chains.md).

The closed-form regression of :mod:`tests.engines.helpers` in minibatches of 20 at a cold
T, where the minibatch gradient noise dominates the injected noise: the default sampler
runs hot and wide there, the corrected one samples the exact tempered posterior with
momenta at the target temperature. The gradient-noise estimator is checked against the
per-example gradients, the options against the engine protocol, and the default update
against the hand-written one it has always been.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.func import grad, vmap

from bayesflow.engines.base import Batch, ChainBatch, Problem
from bayesflow.engines.fit import fit
from bayesflow.engines.sgmcmc import (
    build_chains,
    group_gradient,
    independent_batch,
    minibatch_variance,
)
from bayesflow.methods import METHODS
from bayesflow.methods.sghmc import corrected_step
from bayesflow.temperature import ChainTempering, Tempering
from tests.engines.helpers import NUM_DATA, build_engine, exact, make_regression, tensors

REMEDY = {"discretisation": "matched", "gradient_noise": "estimated"}
# ε = 0.05, α = 2 (a = 0.1) as the closed-form SGHMC tests, in minibatches of 20: the
# per-example gradient variance is about 1 per coordinate, so at T = 0.01 (𝒯 = 5e-5)
# r = ε²V/𝒯 ≈ 2 and the friction must rise to a ≈ 0.7 (at T = 1 only the noise shrinks).
MINIBATCH = {"lr": 0.05, "alpha": 2.0, "batch_size": 20, "chains": 32, "epochs": 300,
             "burn_in": 600, "thin": 4}
CACHE: dict[str, tuple[Any, float]] = {}


def sample(temperature: float, **options: Any) -> tuple[Any, float]:
    """The regression's SGHMC fit in minibatches and its kinetic temperature ratio
    (mean m² over the epochs after burn-in, over 𝒯)."""
    key = repr((temperature, sorted(options.items())))
    if key in CACHE:
        return CACHE[key]
    problem, inputs, targets = make_regression()
    spec = METHODS.get("sghmc").spec.model_validate({"engine": "sghmc", **MINIBATCH, **options})
    tempering = Tempering(temperature, NUM_DATA, "posterior")
    engine = METHODS.get("sghmc").builder()(problem, tempering, spec)
    squares: list[float] = []

    def record(epoch: int, state: Any) -> None:
        if epoch > 100:
            squares.append(float((state.momenta**2).mean()))

    # Every chain starts at the exact mean: a raised friction slows the approach to it.
    start = exact(inputs, targets, temperature, "posterior").mean.expand(spec.chains, 3)
    result = fit(engine, start.clone(), inputs, targets, torch.Generator().manual_seed(0),
                 on_state=record)
    CACHE[key] = result, sum(squares) / len(squares) / tempering.per_datum
    return CACHE[key]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.01])
def test_corrected_sghmc_samples_the_exact_posterior_in_minibatches(temperature: float) -> None:
    """With both options the samples have the exact mean and marginal variances, and the
    momenta the target temperature, at T = 1 and at a T where the correction raises the
    friction."""
    _, inputs, targets = make_regression()
    target = exact(inputs, targets, temperature, "posterior")
    result, kinetic = sample(temperature, **REMEDY)
    samples = result.posterior.samples
    sd = target.marginal_var.sqrt()
    assert ((samples.mean(0) - target.mean).abs() / sd).max() < 0.15
    torch.testing.assert_close(samples.var(0), target.marginal_var, rtol=0.15, atol=0)
    assert abs(kinetic - 1) < 0.05
    if temperature < 1:  # the correction was needed: the friction rose above lr·alpha
        _, damping, _ = corrected_step(0.05, 2.0, 0.0, True, tempering_of(temperature),
                                       result.state.noise, (inputs[:20], targets[:20]))
        assert isinstance(damping, torch.Tensor) and (damping > 0.3).all()


def tempering_of(temperature: float) -> float:
    return Tempering(temperature, NUM_DATA, "posterior").per_datum


def test_default_sghmc_runs_hot_there() -> None:
    """Without the options the same cold chains run hot (kinetic temperature 2.4 T) and
    too wide, so the test above is not passing by accident."""
    _, inputs, targets = make_regression()
    target = exact(inputs, targets, 0.01, "posterior")
    result, kinetic = sample(0.01)
    assert kinetic > 2
    ratio = result.posterior.samples.var(0) / target.marginal_var
    # About 1.25 on average (the shuffled epochs cancel most of the noise in the positions,
    # not in the momenta); each coordinate carries a few percent of Monte Carlo error.
    assert ratio.mean() > 1.15 and (ratio > 1.05).all()


def stationary_kinetic(step: float, damping: float, matched: bool, hessian: Tensor) -> float:
    """mean(m²)/𝒯 of the exact stationary law of full-batch SGHMC on a Gaussian target of
    per-datum precision ``hessian`` (the discrete Lyapunov equation of the linear update)."""
    from scipy.linalg import solve_discrete_lyapunov

    size = hessian.shape[0]
    kick = step * (1 - damping / 2) if matched else step
    injected = damping * (2 - damping) if matched else 2 * damping
    eye = torch.eye(size, dtype=torch.float64)
    update = torch.cat([torch.cat([eye, step * eye], 1),
                        torch.cat([-kick * hessian, (1 - damping) * eye], 1)])
    noise = torch.block_diag(torch.zeros(size, size, dtype=torch.float64), injected * eye)
    covariance = solve_discrete_lyapunov(update.numpy(), noise.numpy())
    return float(covariance.diagonal()[size:].mean())


@pytest.mark.slow
def test_matched_discretisation_alone_fixes_the_kinetic_temperature_at_full_batch() -> None:
    """At full batch (no gradient noise) the momenta's temperature is what the discrete
    update's stationary law says: Euler's is hot (1/(1 − a/2) for a free particle, more
    under curvature), the matched one's has only the curvature's part (of order ε²·H)
    left; both sample the same positions."""
    _, inputs, targets = make_regression()
    options = {"batch_size": None, "epochs": 3000, "burn_in": 1000, "lr": 0.1, "alpha": 2.0}
    euler, euler_kinetic = sample(1.0, **options)
    matched, matched_kinetic = sample(1.0, discretisation="matched", **options)
    # The per-datum precision of the regression's posterior at T = 1.
    hessian = exact(inputs, targets, 1.0, "posterior").precision / NUM_DATA
    expected_euler = stationary_kinetic(0.1, 0.2, False, hessian)
    expected_matched = stationary_kinetic(0.1, 0.2, True, hessian)
    assert expected_euler > 1.15 and 1 < expected_matched < 1 + (expected_euler - 1) / 3
    assert abs(euler_kinetic / expected_euler - 1) < 0.03
    assert abs(matched_kinetic / expected_matched - 1) < 0.03
    torch.testing.assert_close(
        matched.posterior.samples.var(0), euler.posterior.samples.var(0), rtol=0.1, atol=0
    )


def one_at(problem: Problem, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return problem.log_likelihood(problem.forward(params, x[None]), y[None]).sum()


@pytest.mark.parametrize("groups", [2, 4])
def test_group_gradient_mean_is_the_batch_gradient_and_spread_the_example_variance(
    groups: int,
) -> None:
    """The groups' mean gradient is the minibatch gradient; averaged over many batches
    their spread estimates the per-example gradient variance."""
    problem, inputs, targets = make_regression()
    spec = METHODS.get("sghmc").spec.model_validate({"engine": "sghmc", "batch_size": 20})
    chains = build_chains("sghmc", problem, Tempering(1.0, NUM_DATA), spec)
    gradient = group_gradient(chains, groups)
    params = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64)
    grads, values, spread = gradient(params, (inputs[:20], targets[:20]))
    whole, whole_values = chains.gradient(params, (inputs[:20], targets[:20]))
    torch.testing.assert_close(grads, whole)
    torch.testing.assert_close(values, whole_values)
    generator = torch.Generator().manual_seed(0)
    estimates = []
    for _ in range(2000):
        index = torch.randperm(NUM_DATA, generator=generator)[:20]
        estimates.append(gradient(params, (inputs[index], targets[index]))[2])
    truth = vmap(grad(lambda p, x, y: one_at(problem, p, x, y)), in_dims=(None, 0, 0))(
        params[0], inputs, targets
    ).var(0)
    torch.testing.assert_close(torch.stack(estimates).mean(0)[0], truth, rtol=0.1, atol=0)
    assert spread is not None and spread.shape == (1, 3)


def test_group_gradient_of_own_batches_and_of_an_uneven_batch() -> None:
    """A ChainBatch is cut per chain; a batch the groups do not divide gives no estimate."""
    problem, inputs, targets = make_regression()
    spec = METHODS.get("sghmc").spec.model_validate({"engine": "sghmc", "batch_size": 6,
                                                     "chains": 2})
    chains = build_chains("sghmc", problem, Tempering(1.0, NUM_DATA), spec)
    gradient = group_gradient(chains, 2)
    params = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batch = ChainBatch(inputs[:12].reshape(2, 6, 3), targets[:12].reshape(2, 6))
    grads, _, spread = gradient(params, batch)
    torch.testing.assert_close(grads, chains.gradient(params, batch)[0])
    first = [chains.gradient(params[:1], (inputs[s : s + 3], targets[s : s + 3]))[0][0]
             for s in (0, 3)]
    torch.testing.assert_close(spread[0], (first[0] - first[1]) ** 2 / 2 * 3)
    assert gradient(params, (inputs[:5], targets[:5]))[2] is None


def test_minibatch_variance_is_the_example_variance_over_the_batch_size() -> None:
    """V = s²/B for B examples drawn independently, for a shared batch or one per chain."""
    spread = torch.full((2, 3), 2.0)
    batch: Batch = (torch.zeros(10, 3), torch.zeros(10))
    torch.testing.assert_close(minibatch_variance(spread, batch), torch.full((2, 3), 0.2))
    own = ChainBatch(torch.zeros(2, 5, 3), torch.zeros(2, 5))
    torch.testing.assert_close(minibatch_variance(spread, own), torch.full((2, 3), 0.4))


@pytest.mark.parametrize(("chains", "minibatches"), [(1, "independent"), (3, "shared"),
                                                     (3, "independent")])
def test_the_estimate_draws_its_own_independent_minibatches(
    chains: int, minibatches: str
) -> None:
    """With the estimate the fit hands the engine the whole data set and the engine draws
    B examples with replacement per step, one draw per chain unless they share a stream."""
    problem, inputs, targets = make_regression()
    spec = METHODS.get("sghmc").spec.model_validate(
        {"engine": "sghmc", "batch_size": 20, "chains": chains, "minibatches": minibatches,
         **REMEDY}
    )
    engine = METHODS.get("sghmc").builder()(problem, Tempering(1.0, NUM_DATA), spec)
    assert engine.batch_size is None and engine.streams == 1
    chains_of = build_chains("sghmc", problem, Tempering(1.0, NUM_DATA), spec)
    batch = independent_batch(inputs, targets, 20, chains_of, torch.Generator().manual_seed(0))
    expected = (chains, 20) if minibatches == "independent" and chains > 1 else (20,)
    assert tuple(batch[1].shape) == expected
    assert isinstance(batch, ChainBatch) == (len(expected) == 2)
    state = engine.init(torch.zeros(3, dtype=torch.float64), torch.Generator().manual_seed(0))
    state, _ = engine.update(state, (inputs, targets))
    assert state.step == 10  # one epoch: ⌈200 / 20⌉ steps


def test_default_update_is_unchanged() -> None:
    """Without the options the update is the posteriors library's, draw for draw."""
    problem, inputs, targets = make_regression()
    lr, alpha, beta, temperature, steps = 0.05, 1.5, 2.0, 0.5, 20
    spec = METHODS.get("sghmc").spec.model_validate(
        {"engine": "sghmc", "lr": lr, "alpha": alpha, "beta": beta, "epochs": steps,
         "batch_size": None}
    )
    tempering = Tempering(temperature, NUM_DATA)
    engine = METHODS.get("sghmc").builder()(problem, tempering, spec)
    start = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    samples = fit(engine, start, inputs, targets, torch.Generator().manual_seed(4)).posterior.samples
    generator, per_datum = torch.Generator().manual_seed(4), tempering.per_datum
    params = start.clone()
    momenta = torch.randn((1, 3), generator=generator, dtype=torch.float64)[0] * per_datum**0.5
    expected = []
    for _ in range(steps):
        gradient = torch.func.grad(problem.log_posterior)(params, (inputs, targets))
        noise = torch.randn((1, 3), generator=generator, dtype=torch.float64)[0]
        params, momenta = (
            params + lr * momenta,
            momenta + lr * gradient - lr * alpha * momenta
            + (lr * (2 * alpha - lr * beta) * per_datum) ** 0.5 * noise,
        )
        expected.append(params)
    torch.testing.assert_close(samples, torch.stack(expected), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_options_keep_the_engine_protocol(
    problem: Problem, data: Batch, temperature: float
) -> None:
    """With both options: finite states and posteriors, the same seed gives the same
    samples, and at T = 0 nothing is estimated (no temperature to keep)."""
    def run() -> Any:
        engine = build_engine("sghmc", problem, temperature, **REMEDY)
        generator = torch.Generator().manual_seed(1)
        return fit(engine, problem.init_params(generator), *data, generator)

    first, second = run(), run()
    assert torch.equal(first.posterior.samples, second.posterior.samples)
    assert all(torch.isfinite(value).all() for value in tensors(first.posterior).values())
    assert (first.state.noise is None) == (temperature == 0)


def test_options_with_one_temperature_per_chain(problem: Problem, data: Batch) -> None:
    """A vectorised grid (one T per chain, T = 0 among them) takes the options: every
    chain stays finite and the estimate is kept per chain."""
    tempering = ChainTempering((0.0, 0.1, 1.0), problem.num_data, "likelihood")
    engine = build_engine("sghmc", problem, tempering, **REMEDY)
    generator = torch.Generator().manual_seed(0)
    starts = torch.stack([problem.init_params(generator) for _ in range(3)])
    result = fit(engine, starts, *data, generator)
    assert torch.isfinite(result.state.momenta).all()
    assert result.state.noise is not None and result.state.noise.shape == (3, problem.dimension)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gradient_noise": "estimated", "beta": 0.5}, "set beta"),
        ({"discretisation": "matched", "lr": 0.5, "alpha": 3.0}, "lr·alpha <= 1"),
    ],
)
def test_inconsistent_options_are_spec_errors(options: dict[str, Any], message: str) -> None:
    """Options that contradict each other are refused with what to change."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        METHODS.get("sghmc").spec.model_validate({"engine": "sghmc", **options})
