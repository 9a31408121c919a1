"""Kinetic and configurational temperature of SG-MCMC states (Wenzel et al. 2020, Sec. 4).

For a sampler whose stationary distribution is exp(−U(θ)/𝒯 − mᵀM⁻¹m/(2𝒯)):

- the **kinetic** temperature T_kin = (1/d) Σᵢ mᵢ²/Mᵢ has expectation 𝒯, and for a tensor
  of d parameters d·T_kin/𝒯 ∼ χ²_d, so a tensor's 99% interval is
  𝒯·[χ²_d(0.005), χ²_d(0.995)]/d;
- the **configurational** temperature T_conf = (1/d) Σᵢ θᵢ ∂U/∂θᵢ has expectation 𝒯 too
  (integrate by parts: E[θᵢ ∂ᵢU] = 𝒯 E[∂θᵢ/∂θᵢ] = 𝒯).

Both are in the units of the potential U the sampler uses: with bayesflow's SGHMC, U is
minus the per-datum log posterior f and 𝒯 = T/N (:mod:`bayesflow.temperature`), so pass
``expected=tempering.per_datum``; with U = −Σᵢ log p(yᵢ|xᵢ,θ) − log p(θ) they estimate T.
SGHMC's minibatch gradients make T_conf noisier but not biased (θ·∇U is linear in ∇U).
At T = 0 there is no temperature to check and these functions refuse ``expected = 0``.

Every function takes arrays of shape (..., d): the leading axes (chains, kept steps)
are pooled for the overall number and kept for the per-tensor ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import gammaincinv

__all__ = [
    "ConfigurationalTemperature",
    "KineticTemperature",
    "configurational_temperature",
    "kinetic_temperature",
]


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def _tensors(
    dimension: int,
    param_shapes: Sequence[Sequence[int]] | None,
    param_names: Sequence[str] | None,
) -> tuple[list[int], tuple[str, ...]]:
    """The sizes and names of the tensors a flat vector of ``dimension`` is made of."""
    if param_shapes is None:
        return [dimension], tuple(param_names or ("all",))
    sizes = [int(np.prod(shape)) for shape in param_shapes]
    if sum(sizes) != dimension:
        raise ValueError(f"param_shapes hold {sum(sizes)} parameters, the vectors {dimension}")
    names = tuple(param_names) if param_names is not None else tuple(map(str, range(len(sizes))))
    if len(names) != len(sizes):
        raise ValueError(f"expected {len(sizes)} param_names, got {len(names)}")
    return sizes, names


def _per_tensor_mean(values: np.ndarray, sizes: list[int]) -> np.ndarray:
    """(..., d) → (..., P): the mean over each tensor's slice of the last axis."""
    pieces = np.split(values, np.cumsum(sizes)[:-1], axis=-1)
    return np.stack([piece.mean(axis=-1) for piece in pieces], axis=-1)


def _chi2_quantile(probability: float, degrees: np.ndarray) -> np.ndarray:
    """χ²_d quantile as 2·P⁻¹(d/2, p), P the regularised lower incomplete gamma function
    (scipy.special, which imports in a fraction of scipy.stats' time)."""
    return np.asarray(2.0 * gammaincinv(degrees / 2.0, probability))


def _check_expected(expected: float) -> None:
    if not expected > 0:
        raise ValueError(
            f"expected temperature must be > 0, got {expected}; at T = 0 SGHMC is "
            "deterministic and has no temperature to check"
        )


@dataclass(frozen=True)
class KineticTemperature:
    """Kinetic temperatures with their χ² intervals.

    Attributes:
        temperature: overall T_kin, the mean over all parameters and leading axes.
        per_tensor: (..., P) T_kin of each tensor (and chain).
        lower, upper: (P,) each tensor's interval.
        inside: (..., P) whether each tensor's T_kin lies in its interval.
        expected: the temperature 𝒯 the sampler targets.
        names: the P tensor names.
        degrees: (P,) each tensor's number of parameters (its χ² degrees of freedom).
    """

    temperature: float
    per_tensor: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    inside: np.ndarray
    expected: float
    names: tuple[str, ...]
    degrees: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def fraction_inside(self) -> float:
        """Fraction of (chain, tensor) pairs inside their interval."""
        return float(self.inside.mean())

    @property
    def count(self) -> int:
        """How many momentum entries the overall number pools (parameters × chains)."""
        sizes = np.round(self.degrees).astype(np.int64)
        return int(sizes.sum() * (self.inside.size // max(len(self.names), 1)))

    def ratio_band(self, level: float = 0.99) -> tuple[float, float]:
        """The ``level`` interval of the overall ratio T_kin/𝒯 at the target: the pooled
        n = parameters × chains squared momenta give n·T_kin/𝒯 ∼ χ²_n. NaN without
        the tensors' sizes (``degrees``)."""
        if self.count == 0:
            return float("nan"), float("nan")
        count = np.array([float(self.count)])
        tail = (1 - level) / 2
        return (float(_chi2_quantile(tail, count)[0] / count[0]),
                float(_chi2_quantile(1 - tail, count)[0] / count[0]))

    def metrics(self) -> dict[str, float]:
        """Summaries ``kinetic_temperature``, ``_ratio``, ``_fraction_inside`` and the
        overall ratio's 99% band ``_band_lower`` / ``_band_upper``; per tensor (means over
        the leading axes) ``kinetic_temperature/<name>``, its interval
        ``kinetic_temperature_lower/<name>`` and ``_upper/<name>``, and the fraction of
        chains inside it, ``kinetic_temperature_inside/<name>``."""
        lower, upper = self.ratio_band()
        result = {
            "kinetic_temperature": self.temperature,
            "kinetic_temperature_ratio": self.temperature / self.expected,
            "kinetic_temperature_fraction_inside": self.fraction_inside,
            "kinetic_temperature_band_lower": lower,
            "kinetic_temperature_band_upper": upper,
        }
        per_name = self.per_tensor.reshape(-1, len(self.names)).mean(axis=0)
        inside = self.inside.reshape(-1, len(self.names)).mean(axis=0)
        for index, name in enumerate(self.names):
            result[f"kinetic_temperature/{name}"] = float(per_name[index])
            result[f"kinetic_temperature_lower/{name}"] = float(self.lower[index])
            result[f"kinetic_temperature_upper/{name}"] = float(self.upper[index])
            result[f"kinetic_temperature_inside/{name}"] = float(inside[index])
        return result


def kinetic_temperature(
    momenta: Any,
    expected: float,
    mass: Any = 1.0,
    param_shapes: Sequence[Sequence[int]] | None = None,
    param_names: Sequence[str] | None = None,
    level: float = 0.99,
) -> KineticTemperature:
    """T_kin = mean of m²/mass overall and per tensor, with each tensor's χ² interval.

    Args:
        momenta: (..., d) momenta, e.g. (K, d) for K chains of an :class:`SGHMCState`.
        expected: 𝒯, the temperature the sampler targets in its own units (for
            bayesflow's SGHMC ``tempering.per_datum`` = T / N).
        mass: scalar or (d,) diagonal mass M (SGHMC here uses 1).
        param_shapes, param_names: the tensors of the flat vector (``problem``'s); without
            them the whole vector is one tensor called ``all``.
        level: the interval's probability (0.99: the 0.5% and 99.5% χ² quantiles).

    Returns:
        A :class:`KineticTemperature`.
    """
    _check_expected(expected)
    values = _as_numpy(momenta) ** 2 / _as_numpy(mass)
    sizes, names = _tensors(values.shape[-1], param_shapes, param_names)
    per_tensor = _per_tensor_mean(values, sizes)
    degrees = np.array(sizes, dtype=np.float64)
    tail = (1 - level) / 2
    lower = expected * _chi2_quantile(tail, degrees) / degrees
    upper = expected * _chi2_quantile(1 - tail, degrees) / degrees
    inside = (per_tensor >= lower) & (per_tensor <= upper)
    return KineticTemperature(
        float(values.mean()), per_tensor, lower, upper, inside, float(expected), names, degrees
    )


@dataclass(frozen=True)
class ConfigurationalTemperature:
    """Configurational temperatures.

    Attributes:
        temperature: overall T_conf, the mean of θᵢ ∂U/∂θᵢ over all parameters and
            leading axes.
        per_tensor: (..., P) T_conf of each tensor (and chain).
        expected: the temperature the sampler targets, if given.
        names: the P tensor names.
        standard_error: the standard error of ``temperature`` from the spread of the
            terms θᵢ ∂U/∂θᵢ it averages, as if they were independent (exact for a
            posterior with independent coordinates; correlated ones make it too small).
    """

    temperature: float
    per_tensor: np.ndarray
    expected: float | None
    names: tuple[str, ...]
    standard_error: float = float("nan")

    def metrics(self) -> dict[str, float]:
        """``configurational_temperature``, ``_ratio`` and its standard error
        ``_ratio_se`` (given ``expected``), and per tensor
        ``configurational_temperature/<name>`` (mean over the leading axes)."""
        result = {"configurational_temperature": self.temperature}
        if self.expected is not None:
            result["configurational_temperature_ratio"] = self.temperature / self.expected
            result["configurational_temperature_ratio_se"] = self.standard_error / self.expected
        per_name = self.per_tensor.reshape(-1, len(self.names)).mean(axis=0)
        result.update(
            {f"configurational_temperature/{n}": float(v) for n, v in zip(self.names, per_name)}
        )
        return result


def configurational_temperature(
    params: Any,
    potential_gradients: Any,
    param_shapes: Sequence[Sequence[int]] | None = None,
    param_names: Sequence[str] | None = None,
    expected: float | None = None,
) -> ConfigurationalTemperature:
    """T_conf = mean of θᵢ ∂U/∂θᵢ overall and per tensor.

    Args:
        params: (..., d) parameter states.
        potential_gradients: (..., d) ∇U at those states, U the *untempered* potential
            whose target is exp(−U/𝒯): for bayesflow's SGHMC that is minus the gradient
            of the per-datum log posterior (mind the sign).
        param_shapes, param_names: the tensors of the flat vector (as for the kinetic one).
        expected: 𝒯 in the same units, for the ratio; optional.

    Returns:
        A :class:`ConfigurationalTemperature`.
    """
    if expected is not None:
        _check_expected(expected)
    values = _as_numpy(params) * _as_numpy(potential_gradients)
    sizes, names = _tensors(values.shape[-1], param_shapes, param_names)
    error = float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")
    return ConfigurationalTemperature(
        float(values.mean()), _per_tensor_mean(values, sizes), expected, names, error
    )
