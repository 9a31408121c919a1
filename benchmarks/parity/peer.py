"""posteriors' side of the parity benchmark: its transforms, as its IMDB example runs them.

Each function takes the same problem, draws and :class:`~benchmarks.parity.fits.Settings`
as bayesflow's side (:func:`benchmarks.parity.fits.fit_bayesflow`) and returns the fitted
posterior as a bayesflow :class:`~bayesflow.engines.base.Posterior` (the module docstring
of :mod:`benchmarks.parity.fits` lists the hyper-parameters). posteriors draws its noise
from torch's global generator, seeded here from the seed (:data:`PEER_SEED_OFFSET`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, ChainBatch, Posterior
from benchmarks.parity.fits import (
    LAPLACE_EPSILON,
    Fit,
    Settings,
    drive,
    epoch_batches,
    initial_momenta,
    serial_schedule,
)
from benchmarks.parity.problem import PRIOR_VARIANCE, Digits, Draws, batches

__all__ = ["PEER_SEED_OFFSET", "fit_posteriors"]

# The global generator's seed for seed s is PEER_SEED_OFFSET + s (see fit_posteriors).
PEER_SEED_OFFSET = 1_000_003


def point(
    digits: Digits,
    params: dict[str, Tensor],
    variance: dict[str, Tensor] | None = None,
    lead: int = 0,
) -> Posterior:
    """A posteriors tree (and its variances) as a bayesflow posterior."""
    mean = digits.flat(params, lead)
    if variance is None:
        return Posterior(mean=mean, var=torch.zeros_like(mean))
    return Posterior(mean=mean, var=digits.flat(variance))


def fit_posteriors(
    digits: Digits,
    method: str,
    temperature: float,
    draws: Draws,
    settings: Settings,
    seed: int,
    mode: Tensor | None = None,
) -> dict[float, Fit]:
    """posteriors' fit of ``method``, as its IMDB example runs it, from the same draws."""
    import torchopt

    from benchmarks.common.peers import fresh, import_posteriors

    posteriors = import_posteriors()
    # posteriors draws its noise from torch's global generator. Seeded with the seed itself
    # it would replay the very uniforms the seed's starts and minibatch orders were drawn
    # from (torch.manual_seed(s) and Generator().manual_seed(s) are one stream), tying the
    # noise to the batches; an offset seed gives an unrelated stream.
    torch.manual_seed(PEER_SEED_OFFSET + seed)
    per_datum = temperature / digits.num_data
    adamw = torchopt.adamw(lr=settings.optimizer_lr, weight_decay=settings.weight_decay)
    if method == "laplace_diag_ggn":
        return laplace_posteriors(digits, posteriors, mode, settings)
    if method in ("sghmc_serial", "sghmc_parallel"):
        return sghmc_posteriors(digits, posteriors, method, temperature, draws, settings)
    if method == "map":
        maximize = torchopt.adamw(
            lr=settings.optimizer_lr, weight_decay=settings.weight_decay, maximize=True
        )
        transform = posteriors.torchopt.build(digits.log_posterior, maximize)
    else:
        transform = posteriors.vi.diag.build(
            digits.log_posterior,
            adamw,
            temperature=per_datum,
            n_samples=1,
            stl=True,
            init_log_sds=settings.init_log_sd,
        )
    began = time.perf_counter()
    state = fresh(transform.init(digits.tree(draws.starts[0])))
    stream = epoch_batches(digits, draws.orders[: settings.epochs], settings)
    state, steps = drive(transform.update, state, stream)
    seconds = time.perf_counter() - began
    if method == "map":
        return {temperature: Fit(point(digits, state.params), seconds, steps)}
    variance = {name: (2 * value).exp() for name, value in state.log_sd_diag.items()}
    return {temperature: Fit(point(digits, state.params, variance), seconds, steps)}


def laplace_posteriors(
    digits: Digits, posteriors: Any, mode: Tensor | None, settings: Settings
) -> dict[float, Fit]:
    """posteriors' diagonal GGN Laplace around ``mode``: the prior precision is its initial
    precision; every temperature is applied at prediction, as the example does."""
    from benchmarks.common.peers import fresh

    assert mode is not None, "Laplace needs the MAP (mode)"
    transform = posteriors.laplace.diag_ggn.build(
        digits.forward, digits.outer_log_likelihood, init_prec_diag=1 / PRIOR_VARIANCE
    )
    began = time.perf_counter()
    state = fresh(transform.init(digits.tree(mode)))
    state, steps = drive(transform.update, state, iter(batches(digits, None, settings.batch_size)))
    seconds = time.perf_counter() - began
    mean, precision = digits.flat(state.params), digits.flat(state.prec_diag)
    # The example's own setting leaves the prior out of the precision (its Laplace config
    # has prior_sd = inf): sd = sqrt(T / (sum of GGNs + epsilon)).
    ggn = (precision - 1 / PRIOR_VARIANCE).clamp(min=0)
    fits = {}
    for temperature in settings.temperatures:
        example = Posterior(mean=mean, var=temperature / (ggn + LAPLACE_EPSILON))
        posterior = Posterior(mean=mean, var=temperature / (precision + LAPLACE_EPSILON))
        fits[temperature] = Fit(posterior, seconds, steps, {"example_no_prior": example})
    return fits


def sghmc_posteriors(
    digits: Digits,
    posteriors: Any,
    method: str,
    temperature: float,
    draws: Draws,
    settings: Settings,
) -> dict[float, Fit]:
    """posteriors' SGHMC from the same starts, momenta and minibatch orders as bayesflow's."""
    from benchmarks.common.peers import fresh

    momenta = initial_momenta(digits, method, temperature, draws, settings)
    hyper = {
        "lr": settings.lr,
        "alpha": settings.alpha,
        "beta": 0.0,
        "temperature": temperature / digits.num_data,
    }
    if method == "sghmc_serial":
        epochs, burn_in, thin = serial_schedule(settings, digits.num_data)
        transform = posteriors.sgmcmc.sghmc.build(digits.log_posterior, **hyper)
        samples: list[Tensor] = []

        def keep(step: int, state: Any) -> None:
            if step > burn_in and (step - burn_in) % thin == 0:
                samples.append(digits.flat(state.params))

        began = time.perf_counter()
        state = fresh(transform.init(digits.tree(draws.starts[0]), momenta=digits.tree(momenta[0])))
        stream = epoch_batches(digits, draws.orders[:epochs], settings)
        _, steps = drive(transform.update, state, stream, keep)
        fit = Fit(Posterior(samples=torch.stack(samples)), time.perf_counter() - began, steps)
        return {temperature: fit}
    stream = epoch_batches(digits, draws.orders[: settings.epochs], settings)
    began = time.perf_counter()
    if settings.peer_chains == "stacked":
        transform = posteriors.sgmcmc.sghmc.build(digits.chains_log_posterior, **hyper)
        state = fresh(transform.init(digits.tree(draws.starts), momenta=digits.tree(momenta)))
        state, steps = drive(transform.update, state, stream)
        final = digits.flat(state.params, lead=1)
    else:
        transform = posteriors.sgmcmc.sghmc.build(digits.log_posterior, **hyper)
        states = [
            fresh(transform.init(digits.tree(start), momenta=digits.tree(momentum)))
            for start, momentum in zip(draws.starts, momenta)
        ]

        def each(states: list[Any], batch: Batch) -> tuple[list[Any], None]:
            assert isinstance(batch, ChainBatch)
            return [
                transform.update(state, (batch.inputs[k], batch.targets[k]))[0]
                for k, state in enumerate(states)
            ], None

        states, steps = drive(each, states, stream)
        final = torch.stack([digits.flat(state.params) for state in states])
    return {temperature: Fit(Posterior(samples=final), time.perf_counter() - began, steps)}
