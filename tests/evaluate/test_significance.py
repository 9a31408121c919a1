"""Tests across seeds (bayesflow.evaluate.significance) against SciPy's t-tests, the
noncentral t and simulation."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from bayesflow.evaluate.significance import (
    compare,
    holm,
    minimum_detectable_difference,
    paired_test,
    power,
    welch_test,
)


@pytest.mark.parametrize("count", [2, 3, 5, 12])
def test_paired_test_matches_scipy_ttest_rel(count: int) -> None:
    """Statistic, p-value and degrees of freedom equal scipy.stats.ttest_rel's."""
    generator = np.random.default_rng(count)
    a = generator.normal(0.3, 0.02, count)
    b = a + generator.normal(0.01, 0.01, count)
    result = paired_test(a, b)
    expected = stats.ttest_rel(a, b)
    assert result.test == "paired" and result.seeds == count
    assert result.statistic == pytest.approx(expected.statistic, rel=1e-10)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-10)
    assert result.degrees_of_freedom == expected.df
    assert result.difference == pytest.approx(float(np.mean(a - b)), rel=1e-12)


@pytest.mark.parametrize(("count_a", "count_b"), [(2, 2), (3, 5), (6, 4)])
def test_welch_test_matches_scipy_ttest_ind_unequal_variances(count_a: int, count_b: int) -> None:
    """Statistic, p-value and Welch's degrees of freedom equal ttest_ind(equal_var=False)'s."""
    generator = np.random.default_rng(10 * count_a + count_b)
    a = generator.normal(0.3, 0.01, count_a)
    b = generator.normal(0.32, 0.04, count_b)
    result = welch_test(a, b)
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert result.test == "welch" and result.seeds == min(count_a, count_b)
    assert result.statistic == pytest.approx(expected.statistic, rel=1e-10)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-10)
    assert result.degrees_of_freedom == pytest.approx(expected.df, rel=1e-10)


@pytest.mark.parametrize("freedom", [1, 2, 4, 9, 40])
def test_the_detectable_difference_has_the_wanted_power_under_the_noncentral_t(freedom: int) -> None:
    """power(MDD) = 0.8 at α = 0.05 and 0.9 at α = 0.01, the power computed from
    scipy.stats.nct directly (not through the module's power()); the lower tail
    F(−t*; λ) as 1 − F(t*; −λ), where SciPy's cdf returns nan."""
    scale = 0.013
    for alpha, wanted in [(0.05, 0.8), (0.01, 0.9)]:
        detectable = minimum_detectable_difference(scale, freedom, alpha, wanted)
        critical = stats.t.ppf(1 - alpha / 2, freedom)
        shift = detectable / scale
        achieved = stats.nct.sf(critical, freedom, shift) + stats.nct.sf(critical, freedom, -shift)
        assert achieved == pytest.approx(wanted, abs=1e-8)
        assert power(detectable, scale, freedom, alpha) == pytest.approx(wanted, abs=1e-8)


def test_the_detectable_difference_tends_to_the_normal_closed_form() -> None:
    """For many degrees of freedom the MDD is (z_0.975 + z_0.8)·se (2.8016·se), and above
    it for few (the t distribution's heavier tails)."""
    closed = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert minimum_detectable_difference(1.0, 100_000) == pytest.approx(closed, rel=1e-3)
    assert minimum_detectable_difference(1.0, 2) > minimum_detectable_difference(1.0, 9) > closed
    # the one-sample t-test's effect size for n = 10 (G*Power, Cohen's tables: d ≈ 0.996)
    assert minimum_detectable_difference(1.0 / math.sqrt(10), 9) == pytest.approx(0.996, abs=1e-3)


@pytest.mark.parametrize("count", [3, 5])
def test_paired_tests_at_the_detectable_difference_reject_80_percent_of_the_time(count: int) -> None:
    """Simulation: n normal differences with mean MDD(σ/√n) and sd σ; ttest_rel rejects at
    α = 0.05 in 80% of 40,000 draws (within 4 binomial standard errors); at a true
    difference of 0 it rejects in 5%."""
    generator = np.random.default_rng(count)
    sigma, draws = 0.02, 40_000
    detectable = minimum_detectable_difference(sigma / math.sqrt(count), count - 1)
    for mean, expected in [(detectable, 0.8), (0.0, 0.05)]:
        differences = generator.normal(mean, sigma, (draws, count))
        rejected = stats.ttest_1samp(differences, 0.0, axis=1).pvalue <= 0.05
        tolerance = 4 * math.sqrt(expected * (1 - expected) / draws)
        assert rejected.mean() == pytest.approx(expected, abs=tolerance)


def test_welch_tests_at_the_detectable_difference_reject_about_80_percent_of_the_time() -> None:
    """Simulation: samples of 4 and 6 with sds 0.01 and 0.03 differing by the Welch MDD
    computed at the true sds; ttest_ind(equal_var=False) rejects in about 80% (Welch's
    power is itself an approximation: within 0.03)."""
    generator = np.random.default_rng(7)
    sizes, sds, draws = (4, 6), (0.01, 0.03), 40_000
    shares = [sd**2 / size for sd, size in zip(sds, sizes)]
    freedom = sum(shares) ** 2 / sum(share**2 / (size - 1) for share, size in zip(shares, sizes))
    detectable = minimum_detectable_difference(math.sqrt(sum(shares)), freedom)
    a = generator.normal(detectable, sds[0], (draws, sizes[0]))
    b = generator.normal(0.0, sds[1], (draws, sizes[1]))
    rejected = stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue <= 0.05
    assert rejected.mean() == pytest.approx(0.8, abs=0.03)


def test_one_seed_ties_and_no_spread_are_named_not_divided_by() -> None:
    """One seed: no test. Equal at every seed: a tie with MDD 0. The same gap at every
    seed: no spread, MDD 0, no statistic. NaN pairs are dropped."""
    one = paired_test([0.3], [0.2])
    assert one.test == "none" and one.note == "one seed" and math.isnan(one.p_value)
    assert one.difference == pytest.approx(0.1)
    tie = paired_test([0.3, 0.4, 0.5], [0.3, 0.4, 0.5])
    assert tie.note == "tie" and tie.detectable == 0.0 and math.isnan(tie.statistic)
    constant = paired_test([0.31, 0.41], [0.3, 0.4])
    assert constant.note == "no spread" and constant.detectable == 0.0 and math.isnan(constant.p_value)
    dropped = paired_test([0.3, math.nan, 0.5, 0.2], [0.31, 0.4, 0.52, 0.25])
    assert dropped.seeds == 3 and dropped.p_value == pytest.approx(
        stats.ttest_rel([0.3, 0.5, 0.2], [0.31, 0.52, 0.25]).pvalue, rel=1e-10)
    assert welch_test([0.3], [0.2, 0.4]).note == "one seed"
    assert welch_test([0.3, 0.3], [0.2, 0.2]).note == "no spread"
    assert welch_test([0.3, 0.3], [0.3, 0.3]).note == "tie"
    assert paired_test([], []).note == "no seed"


def test_compare_pairs_by_seed_only_when_both_ran_the_same_seeds() -> None:
    """Same seeds, in any order: paired by seed. A seed missing (or NaN) on one side: Welch."""
    a = {2: 0.30, 0: 0.35, 1: 0.28}
    b = {0: 0.36, 1: 0.30, 2: 0.33}
    paired = compare(a, b)
    expected = stats.ttest_rel([0.35, 0.28, 0.30], [0.36, 0.30, 0.33])
    assert paired.test == "paired" and paired.p_value == pytest.approx(expected.pvalue, rel=1e-10)
    unpaired = compare(a, {**b, 2: math.nan})
    assert unpaired.test == "welch" and unpaired.p_value == pytest.approx(
        stats.ttest_ind([0.30, 0.35, 0.28], [0.36, 0.30], equal_var=False).pvalue, rel=1e-10)


def test_holm_adjusts_a_family_step_down() -> None:
    """Holm by hand: sorted 0.005·4, 0.01·3, 0.03·2, 0.04·1 made non-decreasing, capped at 1;
    nan stays out of the family; one test is left as it is."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.2, math.nan, 0.6])
    assert adjusted[0] == pytest.approx(0.4) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.6)
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([0.03]) == pytest.approx([0.03]) and holm([]) == []


def test_invalid_power_or_freedom_is_an_error() -> None:
    """A power at or below α, or no degrees of freedom, is refused with the value named."""
    with pytest.raises(ValueError, match="power between"):
        minimum_detectable_difference(1.0, 3, alpha=0.05, wanted=0.04)
    with pytest.raises(ValueError, match="degrees of freedom"):
        minimum_detectable_difference(1.0, 0)


@pytest.mark.slow
def test_the_module_and_the_report_tables_import_without_torch() -> None:
    """The statistics and the report's tables are numpy/SciPy/pandas only: no torch."""
    code = (
        "import sys\n"
        "import bayesflow.evaluate.significance, bayesflow.report.differences\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_seeds_to_detect_is_the_fewest_seeds_whose_detectable_difference_reaches_the_gap() -> None:
    """With the observed spread, n seeds detect the gap and n − 1 do not; none without a test."""
    from bayesflow.evaluate.significance import seeds_to_detect

    result = paired_test([1.0, 1.1, 1.2], [1.05, 1.12, 1.3])
    needed = seeds_to_detect(result)
    assert needed is not None and needed > result.seeds
    spread = abs(result.difference / result.statistic) * math.sqrt(result.seeds)
    gap = abs(result.difference)
    assert minimum_detectable_difference(spread / math.sqrt(needed), needed - 1) <= gap
    assert minimum_detectable_difference(spread / math.sqrt(needed - 1), needed - 2) > gap
    assert seeds_to_detect(paired_test([1.0], [2.0])) is None
