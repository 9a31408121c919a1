"""Which cell an evaluation is compared with (``evaluate.reference``), for the planner.

An evaluation of a method at temperature T and seed s reads the reference method's fit
and evaluation of seed s, at T or at the reference's stated temperature. Per seed, not
pooled over seeds: a reference run's own Monte Carlo error then shows as spread across
seeds, as every other method's does, and each seed's comparison needs only its own
reference fit.
"""

from __future__ import annotations

from bayesflow.methods.registry import traits_of
from bayesflow.spec.models import WorkflowSpec

__all__ = ["is_reference_cell", "reference_cell"]


def _grid_temperature(spec: WorkflowSpec, temperature: float) -> float:
    """The temperature of the grid that ``temperature`` names (the spec checks that one
    does, within rounding), so that the reference's stage is the grid's own."""
    return min(spec.temperatures, key=lambda grid: abs(grid - temperature))


def reference_cell(
    spec: WorkflowSpec, method: str, temperature: float | None
) -> tuple[str, float | None] | None:
    """The reference method and the temperature of its fit that the cell of ``method`` at
    ``temperature`` (None: temperature-free) is compared with, or None.

    A temperature-free fit (T → 0) has no same-temperature reference unless the reference
    is temperature-free too; a cell is never its own reference.
    """
    reference = spec.evaluate.reference
    if reference is None or reference.method is None:
        return None
    target: float | None = temperature
    config = spec.methods[reference.method]
    if traits_of(config).shared_across_temperatures(spec.temperature_convention):
        target = None
    elif reference.temperature is not None:
        target = _grid_temperature(spec, reference.temperature)
    elif temperature is None:
        return None
    if reference.method == method and target == temperature:
        return None
    return reference.method, target


def is_reference_cell(spec: WorkflowSpec, method: str, temperature: float | None) -> bool:
    """Whether the cell of ``method`` at ``temperature`` is the reference the others are
    compared with (its own row has nothing to compare)."""
    reference = spec.evaluate.reference
    if reference is None or reference.method != method:
        return False
    return reference_cell(spec, method, temperature) is None
