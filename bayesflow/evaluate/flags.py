"""Flags: a fit's numbers that say the fit is not what it claims to be.

:func:`fit_flags` returns ``{metric: message}`` for one fit, from the values its fit stage
stored (the sampler diagnostics and the per-epoch training loss). The results table shows
each message in a ``flag/<metric>`` column and the tracking hook sets it as the tag
``bayesflow.flag.<metric>`` of the fit's run (with the metric ``flags``, their count), so
the report and the MLflow UI show the same flags next to the numbers they concern.
docs/metrics.md ("Flags") states each criterion and why it was chosen:

- ``kinetic_temperature_ratio``: the kinetic temperature of all momenta (every parameter of
  every chain, pooled) lies outside the 99% band of χ²_n/n, n the number of momenta, that
  it has at the target (Wenzel et al. 2020, Sec. 4);
- ``configurational_temperature_ratio``: the configurational temperature differs from the
  target by more than :data:`CONFIGURATIONAL_TOLERANCE` and by more than
  :data:`SIGNIFICANCE` of its standard errors;
- ``train_loss`` (fits that minimise their loss: variational inference): fewer than
  :data:`MIN_EPOCHS` epochs (not judged), or the mean loss of
  the last tenth of the epochs is below that of the tenth before by more than
  :data:`SIGNIFICANCE` standard errors of that difference and by more than
  :data:`LOSS_TOLERANCE` of the loss's total fall, i.e. the optimiser still makes progress.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = [
    "CONFIGURATIONAL_TOLERANCE",
    "FLAGGED_METRICS",
    "LOSS_TOLERANCE",
    "SIGNIFICANCE",
    "configurational_flag",
    "fit_flags",
    "kinetic_flag",
    "loss_drift",
    "loss_flag",
]

# The metrics a fit can be flagged on, in the order of the results table's columns.
FLAGGED_METRICS = ("kinetic_temperature_ratio", "configurational_temperature_ratio", "train_loss")
# Standard errors a difference must exceed to count as real (about 1 in 740 by chance
# for a normal difference, two-sided).
SIGNIFICANCE = 3.0
# A configurational temperature off by less than this fraction of the target is not
# flagged, however small its standard error.
CONFIGURATIONAL_TOLERANCE = 0.1
# A loss whose last tenth of epochs fell by less than this fraction of the whole fit's
# fall is converged, however small its noise.
LOSS_TOLERANCE = 0.01
# The part of the epochs each of the two compared windows of the loss holds.
LOSS_WINDOW = 0.1
# Fewer epochs than this leave windows too short to estimate their noise.
MIN_EPOCHS = 20


def fit_flags(
    diagnostics: Mapping[str, float], history: Sequence[float], *, minimises_loss: bool
) -> dict[str, str]:
    """Every flag of one fit, ``{metric: message}`` (empty when nothing is wrong).

    Args:
        diagnostics: the fit's sampler diagnostics (``kinetic_temperature_ratio``,
            ``kinetic_temperature_band_lower``, ... of
            :mod:`bayesflow.evaluate.temperatures`); a fit without them gets no
            temperature flag.
        history: the per-epoch training loss.
        minimises_loss: the fit minimises its loss (variational inference), so a loss
            still falling at the end means the fit stopped early.
    """
    flags: dict[str, str] = {}
    for metric, message in (
        ("kinetic_temperature_ratio", kinetic_flag(diagnostics)),
        ("configurational_temperature_ratio", configurational_flag(diagnostics)),
        ("train_loss", loss_flag(history) if minimises_loss else None),
    ):
        if message:
            flags[metric] = message
    return flags


def _finite(values: Mapping[str, float], *names: str) -> list[float] | None:
    found = [values.get(name) for name in names]
    if any(value is None or not math.isfinite(value) for value in found):
        return None
    return [float(value) for value in found if value is not None]


def kinetic_flag(diagnostics: Mapping[str, float]) -> str | None:
    """The flag of a kinetic temperature outside its 99% χ² band, else None."""
    found = _finite(
        diagnostics, "kinetic_temperature_ratio", "kinetic_temperature_band_lower",
        "kinetic_temperature_band_upper",
    )
    if found is None:
        return None
    ratio, lower, upper = found
    if lower <= ratio <= upper:
        return None
    side = "hot: the minibatch gradient noise or the step size adds heat" if ratio > upper else (
        "cold: the chain has not yet reached the target's momentum scale")
    remedy = (
        "for sghmc set discretisation: matched and gradient_noise: estimated "
        "(docs/cold-chains.md), or lower lr or raise batch_size" if ratio > upper else
        "raise burn_in or epochs"
    )
    inside = diagnostics.get("kinetic_temperature_fraction_inside")
    tensors = (
        f"; {inside:.0%} of (chain, tensor) pairs lie inside their own bands" if inside is not None else ""
    )
    return (
        f"kinetic temperature {ratio:.3g} x the target, outside its 99% band "
        f"[{lower:.3g}, {upper:.3g}]{tensors}. The chain runs {side}; {remedy}"
    )


def configurational_flag(diagnostics: Mapping[str, float]) -> str | None:
    """The flag of a configurational temperature off the target, else None."""
    found = _finite(diagnostics, "configurational_temperature_ratio")
    if found is None:
        return None
    (ratio,) = found
    error = diagnostics.get("configurational_temperature_ratio_se", 0.0)
    error = error if math.isfinite(error) else math.inf
    gap = abs(ratio - 1.0)
    if gap <= CONFIGURATIONAL_TOLERANCE or gap <= SIGNIFICANCE * error:
        return None
    if ratio < 0:
        return (
            f"configurational temperature {ratio:.3g} x the target (standard error {error:.2g}): "
            "negative, which no sample of the posterior gives: the positions have not reached "
            "the region the posterior holds (the log posterior still rises as they move on); "
            "run longer (burn_in, epochs) or raise lr"
        )
    where = "hotter" if ratio > 1 else "colder"
    return (
        f"configurational temperature {ratio:.3g} x the target (standard error {error:.2g}): "
        f"the positions sit {where} than the posterior at this temperature; run longer "
        "(burn_in, epochs) or lower lr"
    )


def loss_drift(history: Sequence[float]) -> tuple[float, float, float] | None:
    """How much the loss still falls at the end: ``(fall, noise, total)``.

    ``fall`` is the mean of the tenth of the epochs before the last minus the mean of
    the last tenth (positive when the loss still falls), ``noise`` the standard error of
    that difference (the scatter of the two windows' epochs about a straight line
    through them, over the windows' length), ``total`` the fall
    from the first epoch to the last window. None for fewer than :data:`MIN_EPOCHS`
    epochs or a non-finite loss.
    """
    values = [float(value) for value in history]
    if len(values) < MIN_EPOCHS or not all(math.isfinite(value) for value in values):
        return None
    width = max(int(len(values) * LOSS_WINDOW), 2)
    before, last = values[-2 * width : -width], values[-width:]

    def mean(window: list[float]) -> float:
        return sum(window) / len(window)

    fall = mean(before) - mean(last)
    noise = math.sqrt(2.0 * _residual_variance(before + last) / width)
    return fall, noise, values[0] - mean(last)


def _residual_variance(values: list[float]) -> float:
    """The variance of ``values`` about their least-squares straight line: the epoch-to-
    epoch noise without the trend (a loss falling steadily through both windows would
    otherwise count its own fall as noise and never be flagged)."""
    count = len(values)
    steps = range(count)
    centre_x, centre_y = (count - 1) / 2, sum(values) / count
    spread = sum((x - centre_x) ** 2 for x in steps)
    slope = sum((x - centre_x) * (y - centre_y) for x, y in zip(steps, values, strict=True)) / spread
    residuals = [y - centre_y - slope * (x - centre_x) for x, y in zip(steps, values, strict=True)]
    return sum(r * r for r in residuals) / max(count - 2, 1)


def loss_flag(history: Sequence[float]) -> str | None:
    """The flag of a training loss that still falls at the end of the fit, or of one too
    short to tell (fewer than :data:`MIN_EPOCHS` epochs), else None."""
    drift = loss_drift(history)
    if drift is None:
        if 0 < len(history) < MIN_EPOCHS:  # too short to judge: say so rather than pass it
            return (
                f"train_loss has {len(history)} epochs, fewer than the {MIN_EPOCHS} its "
                "convergence check needs: not judged; raise epochs to check it"
            )
        return None
    fall, noise, total = drift
    if fall <= SIGNIFICANCE * noise or fall <= LOSS_TOLERANCE * abs(total):
        return None
    share = f"{fall / total:.1%} of its total fall" if total > 0 else f"{fall:.3g}"
    multiple = f"{fall / noise:.1f}" if noise > 0 else "many"
    return (
        f"train_loss still falls between the last two tenths of the epochs by {share} "
        f"({multiple} times its noise): the fit has not converged; raise epochs, or the "
        "optimizer's lr"
    )
