"""The one place where the user's temperature becomes what an engine uses.

The user-facing temperature ``T`` is the one of Wenzel et al. (2020): the target is
``p(θ | D)^(1/T) ∝ exp(−U(θ)/T)`` with ``U(θ) = −Σᵢ log p(yᵢ|xᵢ,θ) − log p(θ)``, so the
likelihood **and** the prior are tempered; ``T = 1`` is Bayes and ``T → 0`` is MAP.
With ``convention="likelihood"`` only the likelihood is tempered, as laplace-torch does:
``exp(Σᵢ log p(yᵢ|xᵢ,θ)/T + log p(θ))``.

Engines work with the per-datum normalised log posterior of the posteriors library
(Duffield et al., 2025)::

    f(θ; batch) = mean_{i ∈ batch} log p(yᵢ|xᵢ,θ) + c · log p(θ) / N,   𝒯 = T / N

whose tempered density ``exp(N f / T) = exp(f / 𝒯)`` is the target above, with ``c = 1``
for the posterior convention and ``c = T`` for the likelihood convention. A Gaussian
approximation with per-datum precision ``P`` therefore has covariance ``𝒯 P⁻¹``.

:class:`ChainTempering` holds one temperature per chain, for SG-MCMC chains of a
temperature grid run as one batched program (``execution.vectorize``); each chain's
𝒯 and prior weight are those of its own :class:`Tempering`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CONVENTIONS", "TEMPERATURE_FREE", "ChainTempering", "Convention", "Tempering", "temperature_text"]

TEMPERATURE_FREE = "T → 0"
"""The one name of a fit that does not depend on the temperature (MAP, maximum likelihood, a
deep ensemble: optimisation, the T → 0 limit), fitted once and shared by every temperature;
MLflow logs it at ``temperature`` 0 with ``temperature_shared`` true. A method fitted per
temperature at T = 0 in the grid (VI, Laplace) is its own fit at that limit, a point mass
at its mode, and reads ``0``; a sampler needs T > 0."""


def temperature_text(temperature: float, shared: bool) -> str:
    """How a fit's temperature is written: :data:`TEMPERATURE_FREE` for a temperature-free
    fit (``shared``), else the number (``0.1``; ``0`` for a per-temperature fit at T = 0)."""
    return TEMPERATURE_FREE if shared else f"{temperature:g}"

Convention = Literal["posterior", "likelihood"]
CONVENTIONS: tuple[str, ...] = ("posterior", "likelihood")


@dataclass(frozen=True)
class Tempering:
    """A user temperature, the data size and the convention, converted for engines.

    Args:
        temperature: the user-facing ``T ≥ 0``.
        num_data: ``N``, the number of training points.
        convention: ``"posterior"`` (likelihood and prior tempered) or ``"likelihood"``.
    """

    temperature: float
    num_data: int
    convention: Convention = "posterior"

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.num_data <= 0:
            raise ValueError(f"num_data must be > 0, got {self.num_data}")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {self.convention!r}")

    @property
    def per_datum(self) -> float:
        """𝒯 = T / N, the temperature of the per-datum normalised log posterior."""
        return self.temperature / self.num_data

    @property
    def prior_weight(self) -> float:
        """c, the weight of ``log p(θ) / N`` inside the per-datum log posterior."""
        return 1.0 if self.convention == "posterior" else self.temperature

    @property
    def mode_depends_on_temperature(self) -> bool:
        """Whether the mode of the tempered target moves with T (it does not when the
        whole posterior is tempered), so whether a MAP fit can be shared across T."""
        return self.convention == "likelihood"


@dataclass(frozen=True)
class ChainTempering:
    """One user temperature per chain, the data size and the convention.

    SG-MCMC engines built with it run ``len(temperatures)`` chains, chain k targeting the
    posterior tempered at ``temperatures[k]`` (a vectorised temperature grid).

    Args:
        temperatures: the user-facing ``T_k ≥ 0`` of every chain.
        num_data: ``N``, the number of training points.
        convention: ``"posterior"`` (likelihood and prior tempered) or ``"likelihood"``.
    """

    temperatures: tuple[float, ...]
    num_data: int
    convention: Convention = "posterior"

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("temperatures must hold one temperature per chain, got none")
        object.__setattr__(self, "temperatures", tuple(float(t) for t in self.temperatures))
        for index in range(len(self.temperatures)):
            self.chain(index)  # validates every temperature, the data size and convention

    def chain(self, index: int) -> Tempering:
        """The :class:`Tempering` of chain ``index``."""
        return Tempering(self.temperatures[index], self.num_data, self.convention)

    @property
    def per_datum(self) -> tuple[float, ...]:
        """𝒯_k = T_k / N of every chain."""
        return tuple(self.chain(k).per_datum for k in range(len(self.temperatures)))

    @property
    def prior_weight(self) -> tuple[float, ...]:
        """c_k of every chain (1 under the posterior convention, T_k under the likelihood one)."""
        return tuple(self.chain(k).prior_weight for k in range(len(self.temperatures)))
