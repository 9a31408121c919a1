"""Split R-hat and bulk ESS on iid, shifted and autocorrelated chains."""

from __future__ import annotations

import numpy as np
import pytest

from bayesflow.evaluate import chain_diagnostics, effective_sample_size, split_rhat

CHAINS, DRAWS = 4, 1000


def iid(seed: int = 0) -> np.ndarray:
    """(4, 1000) independent N(0, 1) draws."""
    return np.random.default_rng(seed).standard_normal((CHAINS, DRAWS))


def autoregressive(rho: float, seed: int = 0) -> np.ndarray:
    """(4, 1000) stationary AR(1) chains xₜ = ρ xₜ₋₁ + √(1 − ρ²) εₜ."""
    generator = np.random.default_rng(seed)
    noise = generator.standard_normal((CHAINS, DRAWS))
    chains = np.empty((CHAINS, DRAWS))
    chains[:, 0] = noise[:, 0]
    for step in range(1, DRAWS):
        chains[:, step] = rho * chains[:, step - 1] + np.sqrt(1 - rho**2) * noise[:, step]
    return chains


def test_rhat_of_iid_chains_is_one() -> None:
    """Independent chains from one distribution give R-hat within 1.01 of 1."""
    assert split_rhat(iid()) == pytest.approx(1.0, abs=0.01)


def test_rhat_of_chains_with_different_means_is_large() -> None:
    """Two of four chains shifted by 1 sd push R-hat above 1.1 (one such chain gives ≈ 1.09)."""
    chains = iid()
    chains[:2] += 1.0
    assert split_rhat(chains) > 1.1


def test_rhat_catches_a_drifting_single_chain() -> None:
    """Splitting exposes one chain whose halves disagree (a trend of 2 sd)."""
    chain = np.random.default_rng(2).standard_normal((1, DRAWS)) + np.linspace(0, 2, DRAWS)
    assert split_rhat(chain) > 1.1


def test_rhat_catches_chains_that_differ_only_in_scale() -> None:
    """Chains with equal means but sd 1 and 3 are caught by the folded (tail) R-hat."""
    chains = iid()
    chains[:2] *= 3.0
    assert split_rhat(chains) > 1.1


def test_ess_of_iid_draws_is_about_the_number_of_draws() -> None:
    """4000 independent draws have ESS within 10% of 4000."""
    assert effective_sample_size(iid()) == pytest.approx(CHAINS * DRAWS, rel=0.1)


def test_ess_of_an_autocorrelated_chain_is_much_lower() -> None:
    """AR(1) with ρ = .95 has ESS ≈ n(1 − ρ)/(1 + ρ) ≈ 103 of 4000."""
    ess = effective_sample_size(autoregressive(0.95))
    expected = CHAINS * DRAWS * 0.05 / 1.95
    assert ess == pytest.approx(expected, rel=0.35)
    assert ess < 0.1 * CHAINS * DRAWS


def test_rhat_of_a_constant_summary_is_nan() -> None:
    """Every draw equal: no variance within or between chains, so R-hat is nan."""
    assert np.isnan(split_rhat(np.full((4, 10), 2.5)))


def test_ess_of_a_constant_summary_is_its_number_of_split_draws() -> None:
    """Every draw equal: ESS counts every draw kept by splitting, 4 × 2 × 5 = 40 of 44 (ArviZ's rule)."""
    assert effective_sample_size(np.full((4, 11), 2.5)) == 40.0


def test_a_nan_draw_makes_both_diagnostics_nan() -> None:
    """One NaN draw gives R-hat and ESS nan rather than a number of the other draws."""
    chains = iid()
    chains[1, 5] = np.nan
    assert np.isnan([split_rhat(chains), effective_sample_size(chains)]).all()


def test_diagnostics_need_at_least_four_draws() -> None:
    """A (chains, draws) array with 3 draws is refused with its shape."""
    with pytest.raises(ValueError, match=r"at least 4 draws per chain, got \(2, 3\)"):
        split_rhat(np.zeros((2, 3)))


def test_chain_diagnostics_names_each_summary() -> None:
    """Each summary gets rhat/<name> and ess/<name>."""
    result = chain_diagnostics({"log_posterior": iid(), "theta_0": iid(1)})
    assert set(result) == {"rhat/log_posterior", "ess/log_posterior", "rhat/theta_0",
                           "ess/theta_0"}
