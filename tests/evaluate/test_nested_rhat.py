"""Nested R-hat (bayesflow.evaluate.convergence.nested_rhat) against the paper's formula
written out in loops, ArviZ's classic R-hat, and its expected behaviour."""

from __future__ import annotations

import math

import arviz as az
import numpy as np
import pytest

from bayesflow.evaluate.convergence import nested_rhat


def _by_the_paper(draws: np.ndarray, per: int) -> float:
    """Margossian et al. (2024), eqs. 15-19, one sum at a time."""
    chains, length = draws.shape
    groups = chains // per
    chain_mean = [sum(draws[c]) / length for c in range(chains)]
    super_mean = [sum(chain_mean[k * per + m] for m in range(per)) / per for k in range(groups)]
    overall = sum(super_mean) / groups
    between = sum((mean - overall) ** 2 for mean in super_mean) / (groups - 1)
    within = 0.0
    for k in range(groups):
        members = range(k * per, (k + 1) * per)
        spread = 0.0 if per == 1 else sum((chain_mean[c] - super_mean[k]) ** 2 for c in members) / (per - 1)
        inside = 0.0 if length == 1 else sum(
            sum((draws[c, n] - chain_mean[c]) ** 2 for n in range(length)) / (length - 1) for c in members
        ) / per
        within += (spread + inside) / groups
    return math.sqrt(1 + between / within)


@pytest.mark.parametrize(("superchains", "per", "length"), [(3, 4, 5), (2, 1, 7), (4, 6, 1), (5, 2, 2)])
def test_nested_rhat_is_the_papers_formula(superchains: int, per: int, length: int) -> None:
    """Equal, to rounding, to eqs. 15-19 summed in loops, for M = 1, N = 1 and both > 1."""
    generator = np.random.default_rng(superchains * 100 + per * 10 + length)
    draws = generator.normal(size=(superchains * per, length)) + np.repeat(
        generator.normal(0, 0.5, superchains), per)[:, None]
    assert nested_rhat(draws, per) == pytest.approx(_by_the_paper(draws, per), rel=1e-12)


@pytest.mark.parametrize(("chains", "length"), [(2, 10), (4, 50), (8, 7)])
def test_one_chain_per_superchain_is_arviz_classic_rhat_without_the_n_minus_one_factor(
    chains: int, length: int
) -> None:
    """M = 1: nR̂² = R̂² + 1/N with R̂ ArviZ's unsplit, unnormalised rhat (method="identity"),
    since R̂² = (N−1)/N + B/W and nR̂² = 1 + B/W (B the variance of the chain means)."""
    generator = np.random.default_rng(chains * length)
    draws = generator.normal(size=(chains, length)) + generator.normal(0, 0.3, (chains, 1))
    classic = float(az.rhat(draws, method="identity"))
    assert nested_rhat(draws, 1) ** 2 == pytest.approx(classic**2 + 1 / length, rel=1e-10)


@pytest.mark.parametrize(("per", "length"), [(16, 200), (512, 1)])
def test_superchains_of_iid_draws_have_nested_rhat_near_one(per: int, length: int) -> None:
    """Every draw i.i.d. N(0, 1): nR̂ ≈ √(1 + 1/(MN)), below 1.01 for M·N ≥ 512, and the
    mean over repetitions close to that (B̂ estimates σ²/(MN), Ŵ estimates σ²)."""
    generator = np.random.default_rng(per)
    values = [nested_rhat(generator.normal(size=(4 * per, length)), per) for _ in range(50)]
    assert max(values) < 1.01
    assert np.mean(values) == pytest.approx(math.sqrt(1 + 1 / (per * length)), abs=2e-3)


@pytest.mark.parametrize("length", [1, 20])
def test_superchains_stuck_at_different_values_have_nested_rhat_above_1_01(length: int) -> None:
    """Four superchains of 32 chains, each superchain mixing around its own point (0, 1,
    2, 3 in units of the within sd): far above 1.01, for short and longer chains; the same
    draws regrouped so each superchain holds chains of every point read as mixed."""
    generator = np.random.default_rng(length)
    centres = np.repeat(np.arange(4.0), 32)[:, None]
    draws = centres + generator.normal(size=(128, length))
    assert nested_rhat(draws, 32) > 1.5
    mixed = draws.reshape(4, 32, length).transpose(1, 0, 2).reshape(128, length)
    assert nested_rhat(mixed, 32) < 1.01


def test_degenerate_draws_and_bad_shapes() -> None:
    """Constant superchains that differ: inf; all equal: nan; a NaN draw: nan; a chain count
    that is not K·M with K ≥ 2: an error naming the shape."""
    assert nested_rhat(np.repeat([[0.0], [0.0], [1.0], [1.0]], 3, axis=1), 2) == math.inf
    assert math.isnan(nested_rhat(np.zeros((4, 3)), 2))
    with_nan = np.ones((4, 3))
    with_nan[1, 1] = math.nan
    assert math.isnan(nested_rhat(with_nan, 2))
    for shape, per in [((6, 3), 4), ((4, 3), 4), ((4,), 1), ((4, 3), 0)]:
        with pytest.raises(ValueError, match="at least two superchains"):
            nested_rhat(np.zeros(shape), per)
