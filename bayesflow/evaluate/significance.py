"""Whether a difference between two methods is real across seeds, and how large a
difference the seeds run could have told apart.

A method × temperature × seed grid gives, per cell, one number per seed (the test NLL).
Two cells differ *significantly* when a two-sided t-test at level α rejects "equal
means" across the seeds:

- **paired** (:func:`paired_test`, ``scipy.stats.ttest_rel``): when both cells ran the
  same seeds. In bayesflow a seed fixes a fit's initial weights (the first draw of the
  fit's generator, so chain 0 of every method starts at the same point under one seed,
  and a ``from:`` method starts where its source at that seed ended) and every fit is
  scored on the same test split (``data.split_seed`` is not the fit's seed). The minibatch
  orders and noise are drawn after the starts, in numbers that differ between methods
  (and in a vectorised grid from the group's generator), so two methods share their start
  under a seed, not their minibatch orders. The seed is the experimental unit: the
  differences dₛ = aₛ − bₛ are independent across seeds whatever the correlation inside a
  pair, so the paired test is valid (with uncorrelated pairs it only loses degrees of
  freedom against Welch's), and it is the stronger test when a seed's start moves both
  methods alike.
- **unpaired** (:func:`welch_test`, Welch's t-test, ``ttest_ind(equal_var=False)``): when
  the cells' seeds differ (a fit failed at one seed and not the other).

The **minimum detectable difference** (MDD) is the true mean difference δ that the same
test, with the seeds run and the spread observed, would detect with probability
``power`` (0.8) at level α (0.05). With t = d̄ / (s/√n) ~ noncentral t(ν, δ/(s/√n)),
the power of the two-sided test is

    P(δ) = 1 − F_ν,λ(t*) + F_ν,λ(−t*),   λ = δ / se,   t* = t_{1−α/2, ν},

(F the noncentral t's distribution function, ``scipy.stats.nct``); the MDD solves
P(δ) = power. It is ``k · se`` with k found once for ν at unit scale (Brent's method),
so a zero spread gives an MDD of 0 without a division by it. Paired: ν = n − 1, se = s_d
/ √n with s_d the sd of the differences. Welch: ν the Welch–Satterthwaite degrees of
freedom and se = √(s_a²/n_a + s_b²/n_b) (the usual approximation of Welch's power). For
large ν it tends to (z_{1−α/2} + z_{power}) · se.

Many pairs at once: :func:`holm` adjusts the p-values of a family of tests (Holm 1979,
"A simple sequentially rejective multiple test procedure"), which keeps the chance of
any false "significant" in the family at α without assuming the tests independent.

Edge cases say what they are instead of dividing by zero (:class:`Comparison`.``note``):
one seed (no test), every difference equal (no spread: nothing to test, the gap is the
same at every seed), equal at every seed (a tie).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

__all__ = [
    "Comparison",
    "compare",
    "holm",
    "minimum_detectable_difference",
    "paired_test",
    "power",
    "seeds_to_detect",
    "welch_test",
]

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class Comparison:
    """One two-sided t-test of "a and b have equal means" across seeds.

    Attributes:
        test: ``"paired"``, ``"welch"`` or ``"none"`` (no test possible).
        seeds: the seeds (pairs) behind the paired test; for Welch, the smaller of the
            two samples' sizes.
        difference: mean(a) − mean(b) (the mean of the paired differences).
        statistic: the t statistic; nan when no test is possible.
        degrees_of_freedom: ν of the t distribution (n − 1, or Welch's); nan without a test.
        p_value: two-sided; nan when no test is possible.
        detectable: the minimum detectable difference at ``ALPHA`` and ``POWER``; nan
            when no test is possible, 0 when the spread is 0.
        note: why no test was done (``"one seed"``, ``"no spread"``, ``"tie"``), or ``""``.
    """

    test: str
    seeds: int
    difference: float
    statistic: float
    degrees_of_freedom: float
    p_value: float
    detectable: float
    note: str = ""


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def power(difference: float, scale: float, degrees_of_freedom: float, alpha: float = ALPHA) -> float:
    """The power of a two-sided t-test at level ``alpha`` when the true mean difference
    is ``difference`` and its standard error ``scale`` (noncentral t, module docstring).

    Args:
        difference: the true difference δ.
        scale: the standard error se of the mean difference (> 0).
        degrees_of_freedom: ν.
        alpha: the test's level.
    """
    critical = stats.t.ppf(1 - alpha / 2, degrees_of_freedom)
    shift = difference / scale
    # F_ν,λ(−t*) written as 1 − F_ν,−λ(t*) (the noncentral t's symmetry): SciPy 1.17's
    # nct.cdf returns nan far in the lower tail (ν = 1, λ = 11, t* = −12.7), its sf does not.
    return float(stats.nct.sf(critical, degrees_of_freedom, shift)
                 + stats.nct.sf(critical, degrees_of_freedom, -shift))


@lru_cache(maxsize=256)
def _detectable_shift(degrees_of_freedom: float, alpha: float, wanted: float) -> float:
    """λ with power(λ, 1, ν) = ``wanted``: the MDD in standard errors."""
    def gap(shift: float) -> float:
        return power(shift, 1.0, degrees_of_freedom, alpha) - wanted

    # power rises with λ from α at 0; the normal approximation (z_{1-α/2} + z_power)
    # under-states λ for small ν, so search above it, doubling until bracketed.
    upper = 2.0 * (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(wanted))
    while gap(upper) < 0:
        upper *= 2.0
    return float(optimize.brentq(gap, 0.0, upper, xtol=1e-12, rtol=1e-12))


def minimum_detectable_difference(
    scale: float, degrees_of_freedom: float, alpha: float = ALPHA, wanted: float = POWER
) -> float:
    """The smallest true difference a two-sided t-test detects with probability
    ``wanted`` at level ``alpha``, for a mean difference with standard error ``scale``
    and ν degrees of freedom (module docstring). 0 when ``scale`` is 0.

    Args:
        scale: the standard error of the mean difference (≥ 0).
        degrees_of_freedom: ν > 0.
        alpha: the test's level.
        wanted: the power, in (alpha, 1).
    """
    if not degrees_of_freedom > 0:
        raise ValueError(f"expected degrees of freedom > 0, got {degrees_of_freedom}")
    if not alpha < wanted < 1:
        raise ValueError(f"expected a power between alpha={alpha} and 1, got {wanted}")
    return float(scale) * _detectable_shift(float(degrees_of_freedom), float(alpha), float(wanted))


def seeds_to_detect(result: Comparison, alpha: float = ALPHA, wanted: float = POWER, most: int = 1000) -> int | None:
    """How many seeds a study would need for its test to detect, with probability
    ``wanted`` at level ``alpha``, a true difference as large as the one ``result``
    observed, were the spread across seeds what it observed: the smallest n with
    MDD(s / √n, n − 1) ≤ |difference|, s the sd of one seed's difference (the paired
    differences' sd; for Welch, √(s_a² + s_b²), equal seeds per side).

    None when that cannot be said: no test was run (one seed, no spread), the
    difference is 0, or more than ``most`` seeds would be needed.
    """
    if not (math.isfinite(result.statistic) and result.statistic != 0 and result.seeds > 1):
        return None
    spread = abs(result.difference / result.statistic) * math.sqrt(result.seeds)
    for count in range(2, most + 1):
        if minimum_detectable_difference(spread / math.sqrt(count), count - 1, alpha, wanted) <= abs(result.difference):
            return count
    return None


def _rounding(*samples: np.ndarray) -> float:
    """A spread below this is rounding, not variation: a few units in the last place of
    the largest value (0.31 − 0.3 and 0.41 − 0.4 differ by 5.6e-17, not by a seed's effect)."""
    largest = max((float(np.abs(sample).max()) for sample in samples if sample.size), default=0.0)
    return 16 * np.finfo(np.float64).eps * largest


def _untested(test: str, seeds: int, difference: float, note: str, detectable: float = math.nan) -> Comparison:
    nan = math.nan
    return Comparison(test, seeds, difference, nan, nan, nan, detectable, note)


def paired_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                alpha: float = ALPHA) -> Comparison:
    """The paired t-test of a and b, matched by position (one seed per position): as
    ``scipy.stats.ttest_rel(a, b)``, with the MDD from the sd of the differences.

    Pairs where either value is not finite are dropped. One pair: no test (``"one
    seed"``). All differences equal (to rounding, :func:`_rounding`): no test (``"tie"``
    when they are 0, else ``"no spread"``) and an MDD of 0.
    """
    first = np.asarray(a, dtype=np.float64).ravel()
    second = np.asarray(b, dtype=np.float64).ravel()
    if first.shape != second.shape:
        raise ValueError(f"expected paired samples of one length, got {first.size} and {second.size}")
    kept = np.isfinite(first) & np.isfinite(second)
    differences = first[kept] - second[kept]
    count = differences.size
    if count == 0:
        return _untested("none", 0, math.nan, "no seed")
    mean = float(differences.mean())
    if count == 1:
        return _untested("none", 1, mean, "one seed")
    if np.ptp(differences) <= _rounding(first[kept], second[kept]):
        tie = abs(mean) <= _rounding(first[kept], second[kept])
        return _untested("paired", count, mean, "tie" if tie else "no spread", 0.0)
    scale = float(differences.std(ddof=1)) / math.sqrt(count)
    statistic = mean / scale
    freedom = count - 1
    p_value = float(2 * stats.t.sf(abs(statistic), freedom))
    detectable = minimum_detectable_difference(scale, freedom, alpha)
    return Comparison("paired", count, mean, statistic, float(freedom), p_value, detectable)


def welch_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
               alpha: float = ALPHA) -> Comparison:
    """Welch's t-test of a and b (unequal variances), as
    ``scipy.stats.ttest_ind(a, b, equal_var=False)``, with the MDD of the module docstring.

    Non-finite values are dropped. Fewer than two values on a side: no test (``"one
    seed"``). Both sides without spread: no test (``"tie"`` when the means are equal,
    else ``"no spread"``) and an MDD of 0.
    """
    first, second = _finite(a), _finite(b)
    smaller = min(first.size, second.size)
    if smaller == 0:
        return _untested("none", 0, math.nan, "no seed")
    difference = float(first.mean() - second.mean())
    if smaller == 1:
        return _untested("none", 1, difference, "one seed")
    share_a = first.var(ddof=1) / first.size
    share_b = second.var(ddof=1) / second.size
    variance = share_a + share_b
    rounding = _rounding(first, second)
    if max(np.ptp(first), np.ptp(second)) <= rounding:
        return _untested("welch", smaller, difference, "tie" if abs(difference) <= rounding else "no spread", 0.0)
    scale = math.sqrt(variance)
    freedom = variance**2 / (share_a**2 / (first.size - 1) + share_b**2 / (second.size - 1))
    statistic = difference / scale
    p_value = float(2 * stats.t.sf(abs(statistic), freedom))
    detectable = minimum_detectable_difference(scale, freedom, alpha)
    return Comparison("welch", smaller, difference, statistic, float(freedom), p_value, detectable)


def compare(a: dict[int, float], b: dict[int, float], alpha: float = ALPHA) -> Comparison:
    """Two cells' values by seed: the paired test when both finished the same seeds,
    else Welch's test of all their finite values (module docstring)."""
    seeds_a = {seed for seed, value in a.items() if math.isfinite(value)}
    seeds_b = {seed for seed, value in b.items() if math.isfinite(value)}
    if seeds_a == seeds_b:
        order = sorted(seeds_a)
        return paired_test([a[seed] for seed in order], [b[seed] for seed in order], alpha)
    return welch_test([a[seed] for seed in seeds_a], [b[seed] for seed in seeds_b], alpha)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order; nan stays nan and does
    not count towards the family's size.

    Sorted p₍₁₎ ≤ … ≤ p₍ₘ₎ become max over j ≤ i of min(1, (m − j + 1) p₍ⱼ₎); a test is
    significant at α in the family when its adjusted p-value is at most α.
    """
    values = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(values.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(values))
    order = tested[np.argsort(values[tested], kind="stable")]
    size = order.size
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (size - rank) * values[index]))
        adjusted[index] = running
    return [float(value) for value in adjusted]
