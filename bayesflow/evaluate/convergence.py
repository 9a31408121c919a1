"""Split R-hat and effective sample size across chains (Vehtari et al. 2021).

Both take a (chains, draws) array of one scalar summary (the log posterior, one
parameter, one prediction) and follow "Rank-normalization, folding, and localization:
an improved R-hat" (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
https://arxiv.org/abs/1903.08008), as Stan and ArviZ compute them:

- each chain is split into halves (a middle draw of an odd chain is dropped), so a chain
  that drifts shows up as two chains that disagree;
- draws are rank-normalised: zᵢ = Φ⁻¹((rᵢ − 3/8)/(S + 1/4)), rᵢ the average rank among
  all S draws, which makes both numbers well defined for heavy tails;
- R̂ = max(R̂_bulk, R̂_tail), R̂ of the rank-normalised draws and of the rank-normalised
  folded draws |θ − median θ|; R̂ = √(var⁺/W), var⁺ = (n−1)/n W + B/n;
- bulk ESS = M·n / τ̂ on the rank-normalised split chains, τ̂ = −1 + 2 Σₜ ρ̂ₜ summed by
  Geyer's initial monotone positive sequence, ρ̂ₜ from the chains' FFT autocovariances.

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

__all__ = ["chain_diagnostics", "effective_sample_size", "split_rhat"]


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
    """Rank-normalised split R̂ (the maximum of bulk and tail R̂).

    Approximate for SG-MCMC (module docstring). Values above 1.01 (Vehtari et al.'s
    threshold) or, more leniently, 1.1 say the chains have not mixed.

    Args:
        values: (chains, draws) of one scalar summary; at least 4 draws per chain.

    Returns:
        R̂ ≥ about 1; ``nan`` when every draw is equal.
    """
    split = _split(_draws(values))
    bulk = _rhat(_rank_normalise(split))
    tail = _rhat(_rank_normalise(np.abs(split - np.median(split))))
    return float(max(bulk, tail))


def _autocovariance(draws: np.ndarray) -> np.ndarray:
    """Biased (divided by n) autocovariance of each chain at lags 0 … n−1, via FFT."""
    length = draws.shape[1]
    centred = draws - draws.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * length)))
    spectrum = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=1)[:, :length] / length


def _ess(draws: np.ndarray) -> float:
    """ESS of (M, n) draws by Geyer's initial monotone sequence (Stan's estimator)."""
    chains, length = draws.shape
    autocovariance = _autocovariance(draws)
    within = autocovariance[:, 0].mean() * length / (length - 1)
    pooled = within * (length - 1) / length
    if chains > 1:
        pooled += draws.mean(axis=1).var(ddof=1)
    if pooled == 0:
        return float("nan")
    rho = 1 - (within - autocovariance.mean(axis=0)) / pooled
    rho[0] = 1.0
    # Sum consecutive pairs ρ(2k) + ρ(2k+1) while positive (Geyer's initial positive
    # sequence), forcing the pair sums to be non-increasing (initial monotone sequence).
    total, previous_pair, lag = 0.0, np.inf, 0
    while lag + 1 < length:
        pair = rho[lag] + rho[lag + 1]
        if pair <= 0:
            break
        pair = min(pair, previous_pair)
        total += pair
        previous_pair, lag = pair, lag + 2
    size = chains * length
    tau = max(-1.0 + 2.0 * total, 1.0 / np.log10(size))
    return float(size / tau)


def effective_sample_size(values: Any) -> float:
    """Bulk effective sample size of the rank-normalised split chains.

    Approximate for SG-MCMC (module docstring); for iid draws it is close to the number
    of draws, for an AR(1) chain with coefficient ρ close to n(1 − ρ)/(1 + ρ).

    Args:
        values: (chains, draws) of one scalar summary; at least 4 draws per chain.

    Returns:
        The ESS of all chains together.
    """
    return _ess(_rank_normalise(_split(_draws(values))))


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
