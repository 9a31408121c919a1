"""Flags: a kinetic temperature outside its χ² band, a configurational temperature off
target, a VI loss still falling; and how the results table shows them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

from bayesflow.evaluate import configurational_temperature, kinetic_temperature
from bayesflow.evaluate.flags import (
    fit_flags,
    kinetic_flag,
    loss_drift,
    loss_flag,
)
from bayesflow.stages.artefacts import FitArtefact
from bayesflow.stages.table import results_table

PER_DATUM = 1e-3
SHAPES = [(40, 25), (25,), (10, 25)]
NAMES = ["0.weight", "0.bias", "2.weight"]
DIMENSION = sum(int(np.prod(shape)) for shape in SHAPES)


def kinetic(scale: float, chains: int = 3, seed: int = 0) -> dict[str, float]:
    """The kinetic metrics of (chains, d) momenta from N(0, scale · 𝒯)."""
    momenta = math.sqrt(scale * PER_DATUM) * np.random.default_rng(seed).standard_normal((chains, DIMENSION))
    return kinetic_temperature(momenta, PER_DATUM, param_shapes=SHAPES, param_names=NAMES).metrics()


def test_the_overall_band_is_chi2_of_every_momentum() -> None:
    """The band of the pooled ratio is χ²_n(0.005, 0.995)/n with n = parameters × chains."""
    metrics = kinetic(1.0, chains=3)
    count = 3 * DIMENSION
    expected = chi2.ppf([0.005, 0.995], count) / count
    assert (metrics["kinetic_temperature_band_lower"], metrics["kinetic_temperature_band_upper"]) == pytest.approx(
        tuple(expected), rel=1e-9
    )


def test_momenta_at_the_target_are_not_flagged_in_99_of_100_draws() -> None:
    """At the target the pooled ratio leaves its 99% band about once in 100 draws."""
    flagged = sum(kinetic_flag(kinetic(1.0, seed=seed)) is not None for seed in range(200))
    assert flagged <= 8  # binomial(200, 0.01): P(> 8) < 1e-3


@pytest.mark.parametrize("scale", [0.9, 1.1, 4.0])
def test_hot_or_cold_momenta_are_flagged_with_the_band(scale: float) -> None:
    """A 10% hot or cold chain with 3 × 1,275 momenta is outside its ±4% band; the
    message gives the ratio and the band."""
    metrics = kinetic(scale)
    message = kinetic_flag(metrics)
    assert message is not None
    assert f"{metrics['kinetic_temperature_ratio']:.3g} x the target" in message
    assert f"[{metrics['kinetic_temperature_band_lower']:.3g}, " in message
    assert ("hot" in message) == (scale > 1)


def test_a_fit_without_the_band_gets_no_kinetic_flag() -> None:
    """An entry cached before the band was stored (or T = 0: no diagnostics) is not flagged."""
    assert kinetic_flag({"kinetic_temperature_ratio": 5.0}) is None
    assert fit_flags({}, [], minimises_loss=False) == {}


def configurational(scale: float, states: int, seed: int = 1) -> dict[str, float]:
    """Configurational metrics of Gaussian states at s·𝒯, independent coordinates."""
    sd = np.linspace(0.5, 2.0, DIMENSION)
    params = math.sqrt(scale * PER_DATUM) * sd * np.random.default_rng(seed).standard_normal((states, DIMENSION))
    return configurational_temperature(params, params / sd**2, SHAPES, NAMES, expected=PER_DATUM).metrics()


def test_the_configurational_standard_error_is_the_spread_of_the_ratio() -> None:
    """Across 300 repeats the ratio's spread matches the reported standard error."""
    repeats = [configurational(1.0, 1, seed) for seed in range(300)]
    spread = np.std([found["configurational_temperature_ratio"] for found in repeats], ddof=1)
    reported = np.mean([found["configurational_temperature_ratio_se"] for found in repeats])
    assert reported == pytest.approx(spread, rel=0.15)


def test_configurational_flag_needs_a_real_and_large_gap() -> None:
    """0.6 of the target with a small standard error is flagged; within 10% or within
    three standard errors it is not."""
    flags = fit_flags(configurational(0.6, 4), [], minimises_loss=False)
    assert "colder than the posterior" in flags["configurational_temperature_ratio"]
    assert fit_flags(configurational(1.0, 4), [], minimises_loss=False) == {}
    noisy = {"configurational_temperature_ratio": 0.6, "configurational_temperature_ratio_se": 0.2}
    assert fit_flags(noisy, [], minimises_loss=False) == {}
    close = {"configurational_temperature_ratio": 1.08, "configurational_temperature_ratio_se": 1e-4}
    assert fit_flags(close, [], minimises_loss=False) == {}


def noisy_loss(curve: np.ndarray, noise: float = 0.01, seed: int = 0) -> list[float]:
    """A loss curve plus Gaussian noise per epoch."""
    return list(curve + noise * np.random.default_rng(seed).standard_normal(curve.size))


EPOCHS = np.arange(150)


def test_a_settled_loss_is_not_flagged() -> None:
    """A loss that decayed with time constant 10 epochs long before the end is converged."""
    assert loss_flag(noisy_loss(1.0 + 2.0 * np.exp(-EPOCHS / 10))) is None


def test_a_loss_still_falling_is_flagged_with_how_much() -> None:
    """A loss with time constant 60 epochs still falls about 3% of its total fall between
    the last two tenths: flagged, with the share and the remedy."""
    history = noisy_loss(1.0 + 2.0 * np.exp(-EPOCHS / 60))
    fall, noise, total = loss_drift(history)
    assert fall / total == pytest.approx(0.028, abs=0.003) and fall > 5 * noise
    message = loss_flag(history)
    assert message is not None and f"{fall / total:.1%} of its total fall" in message
    assert "raise epochs" in message


def test_a_falling_loss_under_large_noise_or_a_tiny_fall_is_not_flagged() -> None:
    """A fall within three standard errors, or under 1% of the total, is not a flag."""
    assert loss_flag(noisy_loss(1.0 + 2.0 * np.exp(-EPOCHS / 60), noise=1.0)) is None
    slow = 1.0 + 2.0 * np.exp(-EPOCHS / 10) - 1e-4 * EPOCHS
    assert loss_flag(noisy_loss(slow, noise=1e-5)) is None


# The per-epoch training loss of IMDB's VI (CNN-LSTM from the MAP, AdamW 1e-3, T = 1)
# over 20 epochs: still falling steadily at the end.
IMDB_VI_LOSS = [
    408.76, 367.69, 330.76, 297.58, 267.75, 240.94, 216.77, 195.12, 175.56, 158.00,
    142.17, 127.95, 115.06, 103.49, 93.06, 83.61, 75.09, 67.38, 60.39, 54.08,
]


def test_a_steady_fall_is_not_mistaken_for_noise() -> None:
    """A loss falling steadily through both windows is flagged: its trend is not noise
    (the windows' plain variances would call this 2.8 standard errors and pass it)."""
    fall, noise, total = loss_drift(IMDB_VI_LOSS)
    assert fall > 10 * noise
    assert loss_flag(IMDB_VI_LOSS) is not None
    straight = list(np.linspace(3.0, 1.0, 40))
    assert loss_flag(straight) is not None
    assert loss_flag(list(np.full(40, 1.0))) is None


def test_short_histories_are_flagged_as_not_judged() -> None:
    """Fewer than 20 epochs leave windows too short to judge: the flag says so."""
    assert loss_drift(list(np.linspace(3, 1, 19))) is None
    message = loss_flag(list(np.linspace(3, 1, 19)))
    assert message is not None and "19 epochs" in message and "not judged" in message
    assert loss_flag([]) is None
    assert loss_flag(list(np.full(20, 1.0))) is None


def test_only_fits_that_minimise_their_loss_get_a_loss_flag() -> None:
    """A sampler's loss history is not a convergence trace."""
    history = noisy_loss(1.0 + 2.0 * np.exp(-EPOCHS / 60))
    assert set(fit_flags({}, history, minimises_loss=True)) == {"train_loss"}
    assert fit_flags({}, history, minimises_loss=False) == {}


def test_the_results_table_has_a_string_column_per_flag(tmp_path: Path) -> None:
    """flag/<metric> columns hold the message or "", stay strings, and the loss flag
    applies to VI (its method declares loss_convergence), not to MAP."""
    history = noisy_loss(1.0 + 2.0 * np.exp(-EPOCHS / 60))
    cells, artefacts = [], {}
    for method, engine in (("vi", "vi_diag"), ("map", "map")):
        cell = {"cell": f"fit/{method}", "evaluation": f"evaluate/{method}", "method": method,
                "engine": engine, "temperature": 1.0, "seed": 0}
        cells.append(cell)
        artefacts[cell["cell"]] = FitArtefact(tmp_path / "posterior.npz", 1.0, 150, history)
    missing = {f"evaluate/{method}": {"status": "skipped"} for method in ("vi", "map")}
    frame = results_table(cells, artefacts, missing).set_index("method")
    assert {"flag/kinetic_temperature_ratio", "flag/configurational_temperature_ratio", "flag/train_loss"} <= set(frame)
    assert "has not converged" in frame.loc["vi", "flag/train_loss"]
    assert frame.loc["map", "flag/train_loss"] == "" and frame.loc["vi", "flag/kinetic_temperature_ratio"] == ""
    assert pd.api.types.is_string_dtype(frame["flag/train_loss"]) and frame["flag/train_loss"].notna().all()


def test_the_diagnostics_table_has_a_row_per_tensor() -> None:
    """Per-tensor diagnostics become rows; the whole fit's numbers the row `all`;
    non-finite values null; only summaries remain metrics."""
    diagnostics = {**kinetic(1.0), "rhat/theta_0": 1.01, "ess/theta_0": float("nan")}
    fit = FitArtefact(Path("posterior.npz"), 1.0, 10, diagnostics=diagnostics)
    table = fit.diagnostics_table()
    rows = {row[0]: dict(zip(table["columns"], row)) for row in table["data"]}
    assert list(rows) == ["all", *NAMES, "theta_0"]
    assert rows["0.bias"]["kinetic_temperature"] == diagnostics["kinetic_temperature/0.bias"]
    assert rows["theta_0"]["rhat"] == 1.01 and rows["theta_0"]["ess"] is None
    assert rows["all"]["kinetic_temperature_band_upper"] == diagnostics["kinetic_temperature_band_upper"]
    assert set(fit.metrics()) == {
        "fit_seconds", "steps", "kinetic_temperature", "kinetic_temperature_ratio", "kinetic_temperature_fraction_inside",
    }
    assert FitArtefact(Path("posterior.npz"), 1.0, 10).diagnostics_table() == {"columns": [], "data": []}
