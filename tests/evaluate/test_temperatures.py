"""Kinetic and configurational temperature of states drawn at a known temperature."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from bayesflow.evaluate import configurational_temperature, kinetic_temperature

# The per-datum temperature 𝒯 = T / N of bayesflow's SGHMC, for T = 1 and N = 1000.
PER_DATUM = 1e-3
SHAPES = [(20, 10), (10,), (5, 3)]
NAMES = ["0.weight", "0.bias", "2.weight"]
DIMENSION = sum(int(np.prod(shape)) for shape in SHAPES)


def momenta(scale: float, chains: int = 1, seed: int = 0) -> np.ndarray:
    """(chains, d) momenta from N(0, scale · 𝒯)."""
    generator = np.random.default_rng(seed)
    return math.sqrt(scale * PER_DATUM) * generator.standard_normal((chains, DIMENSION))


def test_momenta_at_the_target_temperature_lie_in_every_band() -> None:
    """Momenta from N(0, 𝒯): every tensor's T_kin is inside its 99% χ² interval."""
    check = kinetic_temperature(momenta(1.0), PER_DATUM, param_shapes=SHAPES, param_names=NAMES)
    assert check.fraction_inside == 1.0
    assert check.temperature == pytest.approx(PER_DATUM, rel=0.2)


def test_momenta_four_times_too_hot_lie_in_no_band() -> None:
    """Momenta from N(0, 4𝒯): no tensor is inside its interval and the ratio is about 4."""
    check = kinetic_temperature(momenta(4.0), PER_DATUM, param_shapes=SHAPES, param_names=NAMES)
    assert check.fraction_inside == 0.0
    assert check.metrics()["kinetic_temperature_ratio"] == pytest.approx(4.0, rel=0.2)


def test_kinetic_interval_of_a_two_parameter_tensor() -> None:
    """χ²₂ has quantile −2 log(1 − p), so the 99% interval is 𝒯·[−log .995, −log .005]."""
    check = kinetic_temperature(np.ones(2), 1.0)
    assert (check.lower[0], check.upper[0]) == pytest.approx((-math.log(0.995), -math.log(0.005)))


def test_kinetic_temperature_divides_by_the_mass() -> None:
    """Momenta of 2 with mass 4 give m²/M = 1."""
    assert kinetic_temperature(np.full(6, 2.0), 1.0, mass=4.0).temperature == pytest.approx(1.0)


def test_kinetic_temperature_keeps_chains_apart() -> None:
    """(K, d) momenta give a (K, P) per-tensor table, one check per chain and tensor."""
    check = kinetic_temperature(momenta(1.0, chains=4), PER_DATUM, param_shapes=SHAPES)
    assert check.per_tensor.shape == (4, 3)
    assert check.inside.shape == (4, 3)


def test_kinetic_metrics_are_named_per_tensor() -> None:
    """Per-tensor numbers are logged as kinetic_temperature/<tensor name>."""
    metrics = kinetic_temperature(momenta(1.0), PER_DATUM, param_shapes=SHAPES,
                                  param_names=NAMES).metrics()
    assert {f"kinetic_temperature/{name}" for name in NAMES} <= set(metrics)


def test_kinetic_temperature_refuses_zero_expected_temperature() -> None:
    """At T = 0 there is no temperature to check; the message says so."""
    with pytest.raises(ValueError, match="at T = 0 SGHMC is deterministic"):
        kinetic_temperature(np.ones(3), 0.0)


def test_param_shapes_must_cover_the_vector() -> None:
    """Shapes that hold a different number of parameters than the vector are refused."""
    with pytest.raises(ValueError, match="param_shapes hold 4 parameters, the vectors 3"):
        kinetic_temperature(np.ones(3), 1.0, param_shapes=[(2, 2)])


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_configurational_temperature_of_gaussian_states(scale: float) -> None:
    """States from exp(−U/(s𝒯)), U = Σ θᵢ²/(2σᵢ²), give T_conf ≈ s𝒯 in every tensor."""
    generator = np.random.default_rng(1)
    sd = np.linspace(0.5, 2.0, DIMENSION)  # per-parameter prior-like scales σᵢ
    params = np.sqrt(scale * PER_DATUM) * sd * generator.standard_normal((200, DIMENSION))
    check = configurational_temperature(params, params / sd**2, param_shapes=SHAPES,
                                        param_names=NAMES, expected=PER_DATUM)
    assert check.metrics()["configurational_temperature_ratio"] == pytest.approx(scale, rel=0.05)
    assert check.per_tensor.mean(axis=0) == pytest.approx([scale * PER_DATUM] * 3, rel=0.1)


def test_kinetic_interval_matches_scipy_chi2() -> None:
    """The interval of a 150-parameter tensor is 𝒯·χ²₁₅₀(.005, .995)/150, as scipy.stats gives."""
    check = kinetic_temperature(np.ones(150), 2.0)
    expected = 2.0 * chi2.ppf([0.005, 0.995], 150) / 150
    assert (check.lower[0], check.upper[0]) == pytest.approx(tuple(expected), rel=1e-10)
