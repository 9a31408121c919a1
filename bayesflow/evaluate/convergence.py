"""Split R-hat and effective sample size across chains, as ArviZ computes them.

Both take a (chains, draws) array of one scalar summary (the log posterior, one
parameter, one prediction) and follow "Rank-normalization, folding, and localization:
an improved R-hat" (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
https://arxiv.org/abs/1903.08008) with ArviZ's defaults, ``arviz.rhat(method="rank")``
and ``arviz.ess(method="bulk")``; tests/evaluate/test_reference_libraries.py checks
both against ArviZ to 1e-6:

- each chain is split into halves (a middle draw of an odd chain is dropped), so a chain
  that drifts shows up as two chains that disagree;
- draws are rank-normalised: zᵢ = Φ⁻¹((rᵢ − 3/8)/(S + 1/4)), rᵢ the average rank among
  all S draws, which makes both numbers well defined for heavy tails;
- R̂ = max(R̂_bulk, R̂_tail), R̂ of the rank-normalised draws and of the rank-normalised
  folded draws |θ − median θ|; R̂ = √(var⁺/W), var⁺ = (n−1)/n W + B/n;
- bulk ESS = M·n / τ̂ on the rank-normalised split chains, τ̂ = −1 + 2 Σₜ ρ̂ₜ truncated
  by Geyer's initial positive sequence and made monotone, exactly as Stan and ArviZ do
  it (:func:`_autocorrelation_time`).

:func:`nested_rhat` is the R̂ of chains grouped into superchains that share a starting
point (Margossian et al. 2024): the paper's plain form, for many short chains.

Where ArviZ returns ``nan`` bayesflow does too (a NaN draw), with two exceptions: fewer
than 4 draws per chain is an error, and one chain gets the R̂ of its two halves (ArviZ
asks for two chains). A constant summary has R̂ ``nan`` and, as in ArviZ, an ESS equal
to its number of (split) draws.

For SG-MCMC these are approximate: minibatch noise and a step size that is not
Metropolis-corrected make the chains sample a perturbed target, and R̂ ≈ 1 says the
chains agree with one another, not that they agree with the posterior.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.special import ndtri

from bayesflow.evaluate.ranks import average_ranks

__all__ = ["chain_diagnostics", "effective_sample_size", "nested_diagnostics", "nested_rhat", "split_rhat"]


def _draws(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] < 4:
        raise ValueError(
            f"expected a (chains, draws) array with at least 4 draws per chain, got {array.shape}"
        )
    return array


def _split(draws: np.ndarray) -> np.ndarray:
    """(M, n) → (2M, n // 2): each chain's first and second half, middle draw dropped."""
    half = draws.shape[1] // 2
    return np.concatenate([draws[:, :half], draws[:, -half:]], axis=0)


def _rank_normalise(draws: np.ndarray) -> np.ndarray:
    ranks = average_ranks(draws)
    return np.asarray(ndtri((ranks - 3 / 8) / (draws.size + 1 / 4)))


def _rhat(draws: np.ndarray) -> float:
    """The classic potential scale reduction of (M, n) draws (no splitting)."""
    length = draws.shape[1]
    within = draws.var(axis=1, ddof=1).mean()
    between = length * draws.mean(axis=1).var(ddof=1)
    if within == 0:
        return float("nan") if between == 0 else float("inf")
    pooled = (length - 1) / length * within + between / length
    return float(np.sqrt(pooled / within))


def split_rhat(values: Any) -> float:
    """Rank-normalised split R̂ (the maximum of bulk and tail R̂), ArviZ's ``method="rank"``.

    Approximate for SG-MCMC (module docstring). Values above 1.01 (Vehtari et al.'s
    threshold) or, more leniently, 1.1 say the chains have not mixed.

    Args:
        values: (chains, draws) of one scalar summary; at least 4 draws per chain.

    Returns:
        R̂ ≥ about 1; ``nan`` when every draw is equal or any draw is NaN, ``inf`` when
        each chain is constant but the chains differ.
    """
    draws = _draws(values)
    if np.isnan(draws).any():
        return float("nan")
    split = _split(draws)
    bulk = _rhat(_rank_normalise(split))
    tail = _rhat(_rank_normalise(np.abs(split - np.median(split))))
    # Python's max keeps its first argument when the second is nan, as ArviZ's does.
    return float(max(bulk, tail))


def _autocovariance(draws: np.ndarray) -> np.ndarray:
    """Biased (divided by n) autocovariance of each chain at lags 0 … n−1, via FFT."""
    length = draws.shape[1]
    centred = draws - draws.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * length)))
    spectrum = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :length] / length


def _autocorrelation_time(rho: np.ndarray) -> float:
    """τ̂ = −1 + 2 Σₜ ρ̂ₜ from the combined autocorrelations ρ̂₀ … ρ̂ₙ₋₁ (ρ̂₀ = 1).

    Stan's and ArviZ's estimator, step for step: pairs ρ̂₂ₖ + ρ̂₂ₖ₊₁ are kept while
    positive and the lag stays below n − 3 (Geyer's initial positive sequence), the even
    term of the first pair left out is added when positive, and the kept pairs are
    forced non-increasing (Geyer's initial monotone sequence) by replacing a pair that
    rises with the mean of the pair before it.
    """
    length = rho.size
    kept = np.zeros(length)
    kept[0], kept[1] = 1.0, rho[1]
    even, odd = 1.0, rho[1]
    lag = 1
    while lag < length - 3 and even + odd > 0:
        even, odd = rho[lag + 1], rho[lag + 2]
        if even + odd >= 0:
            kept[lag + 1], kept[lag + 2] = even, odd
        lag += 2
    last = lag - 2
    if even > 0:
        kept[last + 1] = even
    for lag in range(1, last - 1, 2):
        if kept[lag + 1] + kept[lag + 2] > kept[lag - 1] + kept[lag]:
            kept[lag + 1] = kept[lag + 2] = (kept[lag - 1] + kept[lag]) / 2
    return float(-1.0 + 2.0 * kept[: last + 1].sum() + kept[last + 1 : last + 2].sum())


def _ess(draws: np.ndarray) -> float:
    """ESS of (M, n) draws, Stan's and ArviZ's estimator."""
    chains, length = draws.shape
    size = chains * length
    # A constant has no Monte Carlo error: ArviZ reports every draw as effective.
    if np.ptp(draws) < np.finfo(np.float64).resolution:
        return float(size)
    autocovariance = _autocovariance(draws)
    within = autocovariance[:, 0].mean() * length / (length - 1)
    pooled = within * (length - 1) / length
    if chains > 1:
        pooled += draws.mean(axis=1).var(ddof=1)
    rho = 1 - (within - autocovariance.mean(axis=0)) / pooled
    # 1/log10(size) bounds the ESS by size·log10(size) for antithetic chains (Stan's cap).
    tau = max(_autocorrelation_time(rho), 1.0 / np.log10(size))
    return float(size / tau)


def effective_sample_size(values: Any) -> float:
    """Bulk effective sample size of the rank-normalised split chains, ArviZ's ``"bulk"``.

    Approximate for SG-MCMC (module docstring); for iid draws it is close to the number
    of draws, for an AR(1) chain with coefficient ρ close to n(1 − ρ)/(1 + ρ).

    Args:
        values: (chains, draws) of one scalar summary; at least 4 draws per chain.

    Returns:
        The ESS of all chains together; ``nan`` when any draw is NaN, the number of
        split draws when every draw is equal.
    """
    draws = _draws(values)
    if np.isnan(draws).any():
        return float("nan")
    return _ess(_rank_normalise(_split(draws)))


def nested_rhat(values: Any, chains_per_superchain: int) -> float:
    """Nested R̂ of K superchains of M chains each (Margossian, Hoffman, Sountsov,
    Riou-Durand, Vehtari & Gelman, "Nested R-hat: assessing the convergence of Markov chain
    Monte Carlo when running many short chains", Bayesian Analysis 2024,
    https://arxiv.org/abs/2110.13017, eqs. 15-19).

    A superchain is a group of chains started from one point; chains ``k·M … (k+1)·M − 1``
    form superchain k. With θ̄.ₘₖ chain m's mean, θ̄..ₖ superchain k's, θ̄... their mean
    and N draws per chain::

        B̂ = 1/(K−1) Σₖ (θ̄..ₖ − θ̄...)²                 between superchains
        B̃ₖ = 1/(M−1) Σₘ (θ̄.ₘₖ − θ̄..ₖ)²               between chains of k (0 when M = 1)
        W̃ₖ = 1/M Σₘ 1/(N−1) Σₙ (θₙₘₖ − θ̄.ₘₖ)²         within chains of k (0 when N = 1)
        Ŵ = 1/K Σₖ (B̃ₖ + W̃ₖ),   nR̂ = √(1 + B̂ / Ŵ)

    Unlike :func:`split_rhat` the draws are neither split nor rank-normalised (the paper's
    definition), and a chain may hold one draw (N = 1: the last states of K·M short chains,
    parallel SGHMC with ``keep: last``). With one chain per superchain (M = 1) it is the
    classic R̂ without the (N − 1)/N factor: nR̂² = R̂² + 1/N. Margossian et al. read nR̂
    below 1.01 as the superchains agreeing.

    Args:
        values: (chains, draws) of one scalar summary, chains grouped by superchain.
        chains_per_superchain: M ≥ 1; the number of chains must be a multiple K·M with
            K ≥ 2.

    Returns:
        nR̂ ≥ 1; ``nan`` when a draw is NaN or every draw is equal, ``inf`` when every
        superchain is constant but they differ.
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    draws = np.asarray(values, dtype=np.float64)
    per = int(chains_per_superchain)
    if draws.ndim != 2 or draws.shape[1] < 1 or per < 1 or draws.shape[0] % per or draws.shape[0] < 2 * per:
        raise ValueError(
            f"expected (chains, draws) with at least two superchains of {chains_per_superchain} "
            f"chains each, got {draws.shape}"
        )
    if np.isnan(draws).any():
        return float("nan")
    length = draws.shape[1]
    grouped = draws.reshape(-1, per, length)  # (K, M, N)
    chain_means = grouped.mean(axis=2)
    between = chain_means.mean(axis=1).var(ddof=1)
    inside = chain_means.var(axis=1, ddof=1) if per > 1 else np.zeros(grouped.shape[0])
    if length > 1:
        inside = inside + grouped.var(axis=2, ddof=1).mean(axis=1)
    within = inside.mean()
    if within == 0:
        return float("nan") if between == 0 else float("inf")
    return float(np.sqrt(1.0 + between / within))


def chain_diagnostics(summaries: Mapping[str, Any]) -> dict[str, float]:
    """``rhat/<name>`` and ``ess/<name>`` of each (chains, draws) summary.

    Args:
        summaries: name → (chains, draws) values, e.g. ``{"log_posterior": ...,
            "theta_0": ...}``.
    """
    result: dict[str, float] = {}
    for name, values in summaries.items():
        result[f"rhat/{name}"] = split_rhat(values)
        result[f"ess/{name}"] = effective_sample_size(values)
    return result


def nested_diagnostics(summaries: Mapping[str, Any], chains_per_superchain: int) -> dict[str, float]:
    """``nested_rhat/<name>`` of each (chains, draws) summary (:func:`nested_rhat`) and
    ``nested_rhat_max``, the largest of them (nan ones left out; nan when all are)."""
    result = {f"nested_rhat/{name}": nested_rhat(values, chains_per_superchain)
              for name, values in summaries.items()}
    finite = [value for value in result.values() if not np.isnan(value)]
    result["nested_rhat_max"] = max(finite) if finite else float("nan")
    return result
