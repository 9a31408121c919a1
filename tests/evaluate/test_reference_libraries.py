"""R-hat, ESS and ECE against the libraries that define them: ArviZ, torchmetrics, netcal.

Each reference is a dev dependency (``pip install -e '.[dev]'``); a test whose library is
missing is skipped with the command that installs it. Where bayesflow and a library
differ on purpose (an edge of a bin, one chain), a test pins both values, so a change on
either side shows up here and in docs/metrics.md.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import norm, rankdata

from bayesflow.evaluate import ece, effective_sample_size, split_rhat

INSTALL = "(or pip install -e '.[dev]')"


def _reference(module: str, package: str, versions: str) -> Any:
    """Import a reference library, or skip with the command that installs it."""
    with warnings.catch_warnings():
        # ArviZ 0.x announces its 1.0 refactor with a FutureWarning on import.
        warnings.simplefilter("ignore", FutureWarning)
        return pytest.importorskip(
            module, reason=f"{package} is not installed: pip install '{package}{versions}' {INSTALL}"
        )


@pytest.fixture(scope="module")
def arviz() -> Any:
    """ArviZ 0.x, whose rhat/ess return an xarray Dataset."""
    return _reference("arviz", "arviz", ">=0.17,<1")


@pytest.fixture(scope="module")
def torchmetrics() -> Any:
    """torchmetrics' classification metrics."""
    return _reference("torchmetrics.classification", "torchmetrics", ">=1.3")


@pytest.fixture(scope="module")
def netcal() -> Any:
    """netcal's calibration metrics."""
    return _reference("netcal.metrics", "netcal", ">=1.3")


# --- R-hat and ESS against ArviZ ---------------------------------------------------------


def autoregressive(chains: int, draws: int, rho: float, seed: int = 0) -> np.ndarray:
    """(chains, draws) stationary AR(1) chains xₜ = ρ xₜ₋₁ + √(1 − ρ²) εₜ."""
    noise = np.random.default_rng(seed).standard_normal((chains, draws))
    values = np.empty((chains, draws))
    values[:, 0] = noise[:, 0]
    for step in range(1, draws):
        values[:, step] = rho * values[:, step - 1] + np.sqrt(1 - rho**2) * noise[:, step]
    return values


RNG = np.random.default_rng(3)
CHAINS = {
    "two chains of four draws": autoregressive(2, 4, 0.0),
    "odd draws (middle draw dropped)": autoregressive(3, 7, 0.5),
    "few draws": autoregressive(4, 10, 0.3),
    "autocorrelated": autoregressive(4, 1000, 0.95),
    "strongly autocorrelated": autoregressive(4, 101, 0.99),
    "antithetic": autoregressive(2, 200, -0.6),
    "shifted chains": autoregressive(4, 100, 0.0) + np.array([[0.0], [0.0], [1.0], [1.0]]),
    "scaled chains": autoregressive(4, 100, 0.0) * np.array([[1.0], [1.0], [3.0], [3.0]]),
    "heavy tails": RNG.standard_cauchy((4, 200)),
    "ties": RNG.integers(0, 3, (4, 30)).astype(np.float64),
    "constant": np.full((4, 10), 2.5),
    "each chain constant, chains differ": np.repeat(np.arange(4.0)[:, None], 10, axis=1),
}
ONE_CHAIN = {
    "one chain of five draws": autoregressive(1, 5, 0.0),
    "one long chain": autoregressive(1, 1000, 0.8),
}


def _scalar(result: Any) -> float:
    """The one number of ArviZ's answer for an unnamed (chains, draws) array."""
    if hasattr(result, "data_vars"):
        result = result["x"]
    return float(np.asarray(result))


@pytest.mark.parametrize("draws", list(CHAINS.values()), ids=list(CHAINS))
def test_rhat_equals_arviz(arviz: Any, draws: np.ndarray) -> None:
    """split_rhat equals arviz.rhat (rank-normalised, the default) to 1e-6."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ArviZ's 0/0 on constant chains
        expected = _scalar(arviz.rhat(draws))
    np.testing.assert_allclose(split_rhat(draws), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "draws", list({**CHAINS, **ONE_CHAIN}.values()), ids=list({**CHAINS, **ONE_CHAIN})
)
def test_ess_equals_arviz(arviz: Any, draws: np.ndarray) -> None:
    """effective_sample_size equals arviz.ess (bulk, the default) to 1e-6."""
    expected = _scalar(arviz.ess(draws))
    np.testing.assert_allclose(effective_sample_size(draws), expected, rtol=1e-6, atol=0)


def test_a_nan_draw_gives_nan_as_in_arviz(arviz: Any) -> None:
    """One NaN draw makes R-hat and ESS nan in both bayesflow and ArviZ."""
    draws = autoregressive(4, 50, 0.5)
    draws[2, 7] = np.nan
    values = [split_rhat(draws), effective_sample_size(draws),
              _scalar(arviz.rhat(draws)), _scalar(arviz.ess(draws))]
    assert np.isnan(values).all()


def _classic_rhat(arviz: Any, draws: np.ndarray) -> float:
    """ArviZ's R-hat without splitting or rank-normalising (``method="identity"``)."""
    return _scalar(arviz.rhat(draws, method="identity"))


def test_rhat_of_one_chain_is_arviz_rhat_of_its_halves(arviz: Any) -> None:
    """One chain gets max(bulk, tail) of ArviZ's classic R-hat on its rank-normalised halves.

    ArviZ's own default returns nan below two chains; bayesflow keeps the split value.
    """
    chain = autoregressive(1, 400, 0.0) + np.linspace(0.0, 1.0, 400)
    halves = chain.reshape(2, 200)

    def normal_scores(values: np.ndarray) -> np.ndarray:
        return norm.ppf((rankdata(values).reshape(values.shape) - 3 / 8) / (values.size + 1 / 4))

    bulk = _classic_rhat(arviz, normal_scores(halves))
    tail = _classic_rhat(arviz, normal_scores(np.abs(halves - np.median(halves))))
    assert split_rhat(chain) == pytest.approx(max(bulk, tail), rel=1e-6)


# --- ECE against torchmetrics and netcal ---------------------------------------------------


def predictions(points: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(points, classes) probabilities and labels, under-confident below 0.6, over above.

    The probabilities are rounded to float32 (torchmetrics bins in float32) and the labels
    drawn from a sharper or flatter softmax of the same logits, so that some bins are
    over- and some under-confident and the binning changes the value.
    """
    generator = np.random.default_rng(seed)
    logits = generator.normal(0.0, 2.0, (points, classes))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    probs = probs.astype(np.float32).astype(np.float64)
    sharpness = np.where(probs.max(axis=1, keepdims=True) < 0.6, 3.0, 0.5)
    truth = np.exp(logits * sharpness) / np.exp(logits * sharpness).sum(axis=1, keepdims=True)
    labels = np.array([generator.choice(classes, p=row) for row in truth])
    return probs, labels


def _torchmetrics_ece(torchmetrics: Any, probs: np.ndarray, labels: np.ndarray, bins: int) -> float:
    metric = torchmetrics.MulticlassCalibrationError(
        num_classes=probs.shape[1], n_bins=bins, norm="l1"
    )
    return float(metric(torch.as_tensor(probs), torch.as_tensor(labels)))


@pytest.mark.parametrize(("points", "classes", "bins"),
                         [(50, 2, 10), (500, 3, 15), (500, 10, 5), (200, 4, 1)])
def test_equal_width_ece_equals_torchmetrics(
    torchmetrics: Any, points: int, classes: int, bins: int
) -> None:
    """Equal-width ECE equals MulticlassCalibrationError(norm="l1") to 1e-6 (float32 sums)."""
    probs, labels = predictions(points, classes)
    expected = _torchmetrics_ece(torchmetrics, probs, labels, bins)
    assert ece(probs, labels, bins=bins) == pytest.approx(expected, abs=1e-6)


def test_torchmetrics_puts_an_interior_edge_in_the_bin_above(torchmetrics: Any) -> None:
    """Confidence 0.5 with 10 bins: bayesflow's (0.4, 0.5] gives .025, torchmetrics' [0.5, 0.6) .475.

    A right (.5) and a wrong (.45) point: together |.5 − .475| = .025; apart
    (|1 − .5| + |0 − .45|)/2 = .475.
    """
    probs = np.array([[0.5, 0.3, 0.2], [0.45, 0.35, 0.2]])
    labels = np.array([0, 1])
    assert ece(probs, labels, bins=10) == pytest.approx(0.025)
    assert _torchmetrics_ece(torchmetrics, probs, labels, 10) == pytest.approx(0.475, abs=1e-6)


def test_torchmetrics_gives_confidence_one_a_bin_of_its_own(torchmetrics: Any) -> None:
    """A right .95 and a wrong 1.0: bayesflow's (0.9, 1] gives .475, torchmetrics' extra bin .525.

    Together |.5 − .975| = .475; apart (|1 − .95| + |0 − 1|)/2 = .525.
    """
    probs = np.array([[0.95, 0.05, 0.0], [1.0, 0.0, 0.0]])
    labels = np.array([0, 1])
    assert ece(probs, labels, bins=10) == pytest.approx(0.475)
    assert _torchmetrics_ece(torchmetrics, probs, labels, 10) == pytest.approx(0.525, abs=1e-6)


@pytest.mark.parametrize("binning", ["equal_width", "equal_mass"])
@pytest.mark.parametrize(("points", "classes", "bins"),
                         [(50, 3, 5), (500, 3, 10), (500, 10, 15), (1000, 5, 10)])
def test_ece_equals_netcal(
    netcal: Any, binning: str, points: int, classes: int, bins: int
) -> None:
    """ECE equals netcal's ECE(equal_intervals=...) to 1e-9 with three or more classes.

    With two classes netcal measures the positive class, not the top label.
    """
    probs, labels = predictions(points, classes, seed=1)
    metric = netcal.ECE(bins=bins, equal_intervals=binning == "equal_width")
    expected = metric.measure(probs, labels)
    assert ece(probs, labels, bins=bins, binning=binning) == pytest.approx(expected, abs=1e-9)


def test_netcal_puts_an_equal_mass_edge_on_a_point_in_the_bin_above(netcal: Any) -> None:
    """Confidences .6 (right), .7 (wrong), .8 (right), two equal-mass bins cut at the median .7.

    bayesflow's right-closed bins {.6, .7}, {.8}: (2/3)·.15 + (1/3)·.2 = 1/6;
    netcal's left-closed {.6}, {.7, .8}: (1/3)·.4 + (2/3)·.25 = .3.
    """
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1]])
    labels = np.array([0, 2, 1])
    assert ece(probs, labels, bins=2, binning="equal_mass") == pytest.approx(1 / 6)
    expected = netcal.ECE(bins=2, equal_intervals=False).measure(probs, labels)
    assert expected == pytest.approx(0.3)
