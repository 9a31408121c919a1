"""The five methods of the parity benchmark, fitted by each tool from the same draws.

Each ``fit_*`` pair takes the problem (:class:`~benchmarks.parity.problem.Digits`), the
seed's :class:`~benchmarks.parity.problem.Draws` and the :class:`Settings`, and returns the
fitted posterior as a bayesflow :class:`~bayesflow.engines.base.Posterior`, so that one
evaluation (:mod:`bayesflow.evaluate`) scores both tools. bayesflow's side builds each
engine from its spec model through the method registry, as a workflow does, and steps it
with ``init``/``update``/``posterior``; posteriors' side uses the transforms and the
hyper-parameters of its IMDB example (examples/imdb/configs/*.py and train.py):

=================  ==================================================================
MAP                AdamW, lr 1e-3, weight decay 1e-2 (torchopt's default), batch 32
Laplace diag GGN   around each tool's own MAP; precision Σᵢ GGNᵢ + 1/prior variance;
                   posteriors predicts with sd = √(T / (precision + 10⁻³)), as the example
VI diag            AdamW, lr 1e-3, weight decay 1e-2; 1 sample, stick-the-landing,
                   initial log sd −3
serial SGHMC       lr 0.1, α 1, β 0; twice the epochs; burn-in and thinning keep the
                   example's proportions (20,000 of 46,920 steps discarded, 27 samples)
parallel SGHMC     the same sampler, 10 chains, each its own start, momenta and
                   minibatch order, the last state of each kept
=================  ==================================================================

Temperatures: the user's T (likelihood and prior tempered) is 𝒯 = T / N in posteriors'
per-datum convention (:mod:`bayesflow.temperature`); Laplace in posteriors is tempered at
prediction. Both SGHMC sides start from the same momenta (bayesflow's N(0, 𝒯) draw; the
example starts from 0, a 0.01-sd difference at T = 0.1).

posteriors runs the ten parallel chains as one stacked tree whose log posterior is the sum
of the chains' (each chain's gradient is its own; the noise is drawn per element), or with
``peer_chains="loop"`` as ten separate states, the example's way (the same algorithm, ten
times slower); ``tests/test_parity.py`` checks the two agree without noise. posteriors'
side is :mod:`benchmarks.parity.peer`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, Engine, Posterior
from bayesflow.temperature import Tempering
from benchmarks.parity.problem import Digits, Draws, batches

__all__ = [
    "LAPLACE_EPSILON",
    "METHODS",
    "Fit",
    "Settings",
    "fit_bayesflow",
    "serial_schedule",
]

METHODS = ("map", "laplace_diag_ggn", "vi_diag", "sghmc_serial", "sghmc_parallel")
# The IMDB example's Laplace prediction: sd = sqrt(T / (precision + epsilon)).
LAPLACE_EPSILON = 1e-3
# The example's serial SGHMC: 60 epochs of 782 steps (46,920), the first 20,000 discarded,
# then one sample every 1,000 steps (27 samples).
SERIAL_BURN_IN_FRACTION = 20_000 / 46_920
SERIAL_SAMPLES = 27


@dataclass(frozen=True)
class Settings:
    """The hyper-parameters both tools get.

    Attributes:
        epochs: passes of MAP, VI and parallel SGHMC (serial SGHMC runs twice as many).
        batch_size: the minibatch size of every method.
        chains: parallel SGHMC's chains.
        lr: SGHMC's step size; ``alpha`` its friction.
        optimizer_lr, weight_decay: AdamW's, for MAP and VI.
        init_log_sd: VI's initial log standard deviation.
        peer_chains: ``"stacked"`` or ``"loop"`` (see the module docstring).
    """

    epochs: int = 100
    batch_size: int = 32
    chains: int = 10
    lr: float = 0.1
    alpha: float = 1.0
    optimizer_lr: float = 1e-3
    weight_decay: float = 1e-2
    init_log_sd: float = -3.0
    peer_chains: str = "stacked"
    temperatures: tuple[float, ...] = field(default=(0.1, 1.0))


def serial_schedule(settings: Settings, num_data: int) -> tuple[int, int, int]:
    """Serial SGHMC's ``(epochs, burn_in, thin)``: twice the epochs, the example's share of
    burn-in steps and about its 27 samples."""
    epochs = 2 * settings.epochs
    steps = epochs * -(-num_data // settings.batch_size)
    burn_in = round(steps * SERIAL_BURN_IN_FRACTION)
    thin = max(1, (steps - burn_in) // SERIAL_SAMPLES)
    return epochs, burn_in, thin


class Fit(NamedTuple):
    """One tool's fit of one method at one temperature.

    Attributes:
        posterior: the fitted posterior in flat parameter space.
        seconds: wall time of the fit (the update loop; for Laplace the curvature pass).
        steps: update steps taken.
        variants: other posteriors from the same fit, by name (posteriors' Laplace: the
            example's own setting, ``example_no_prior``).
    """

    posterior: Posterior
    seconds: float
    steps: int
    variants: dict[str, Posterior] | None = None


def epoch_batches(digits: Digits, orders: list[Tensor], settings: Settings) -> Iterator[Batch]:
    """Every epoch's minibatches in turn, made from ``orders`` as they are needed."""
    for order in orders:
        yield from batches(digits, order, settings.batch_size)


def clone(generator: torch.Generator) -> torch.Generator:
    """A generator at ``generator``'s state (each fit of a seed starts from the same one)."""
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    return copy


def engine(digits: Digits, method: str, temperature: float, settings: Settings) -> Engine:
    """bayesflow's engine of ``method``, built from its spec model through the registry."""
    from bayesflow.methods import METHODS as REGISTRY

    optimizer = {
        "name": "adamw",
        "lr": settings.optimizer_lr,
        "weight_decay": settings.weight_decay,
    }
    sampler = {
        "engine": "sghmc",
        "lr": settings.lr,
        "alpha": settings.alpha,
        "beta": 0.0,
        "batch_size": settings.batch_size,
    }
    fields: dict[str, Any] = {
        "map": {
            "engine": "map",
            "optimizer": optimizer,
            "epochs": settings.epochs,
            "batch_size": settings.batch_size,
        },
        "laplace_diag_ggn": {
            "engine": "laplace_diag_ggn",
            "from": "map",
            "batch_size": settings.batch_size,
        },
        "vi_diag": {
            "engine": "vi_diag",
            "optimizer": optimizer,
            "epochs": settings.epochs,
            "batch_size": settings.batch_size,
            "n_samples": 1,
            "init_log_sd": settings.init_log_sd,
            "stick_the_landing": True,
        },
        "sghmc_parallel": {
            **sampler,
            "epochs": settings.epochs,
            "chains": settings.chains,
            "keep": "last",
            "minibatches": "independent",
        },
    }.get(method, {})
    if method == "sghmc_serial":
        epochs, burn_in, thin = serial_schedule(settings, digits.num_data)
        fields = {**sampler, "epochs": epochs, "burn_in": burn_in, "thin": thin}
    name = fields["engine"]
    spec = REGISTRY.get(name).spec.model_validate(fields)
    return REGISTRY.get(name).builder()(
        digits.problem, Tempering(temperature, digits.num_data), spec
    )


def drive(
    update: Callable[[Any, Batch], tuple[Any, Any]],
    state: Any,
    stream: Iterator[Batch],
    on_step: Callable[[int, Any], None] | None = None,
) -> tuple[Any, int]:
    """``update`` over every batch of ``stream``; returns the last state and the step count."""
    steps = 0
    for batch in stream:
        state, _ = update(state, batch)
        steps += 1
        if on_step is not None:
            on_step(steps, state)
    return state, steps


def fit_bayesflow(
    digits: Digits,
    method: str,
    temperature: float,
    draws: Draws,
    settings: Settings,
    mode: Tensor | None = None,
) -> dict[float, Fit]:
    """bayesflow's fit of ``method``: one :class:`Fit` per temperature (a Laplace fit
    or a MAP fit serves every temperature, as bayesflow's planner shares them)."""
    if method == "laplace_diag_ggn":
        assert mode is not None, "Laplace needs the MAP (mode)"
        engines = {t: engine(digits, method, t, settings) for t in settings.temperatures}
        first = engines[settings.temperatures[0]]
        began = time.perf_counter()
        state = first.init(mode, torch.Generator())
        state, steps = drive(first.update, state, iter(batches(digits, None, settings.batch_size)))
        seconds = time.perf_counter() - began
        return {t: Fit(e.posterior(state), seconds, steps) for t, e in engines.items()}
    built = engine(digits, method, temperature, settings)
    start = draws.starts if method == "sghmc_parallel" else draws.starts[0]
    epochs = (
        serial_schedule(settings, digits.num_data)[0]
        if method == "sghmc_serial"
        else settings.epochs
    )
    began = time.perf_counter()
    state = built.init(start, clone(draws.generator))
    state, steps = drive(
        built.update, state, epoch_batches(digits, draws.orders[:epochs], settings)
    )
    posterior = built.posterior(state)
    return {temperature: Fit(posterior, time.perf_counter() - began, steps)}


def initial_momenta(
    digits: Digits, method: str, temperature: float, draws: Draws, settings: Settings
) -> Tensor:
    """The momenta bayesflow's SGHMC ``init`` draws for this seed (K, d), for the peer."""
    built = engine(digits, method, temperature, settings)
    start = draws.starts if method == "sghmc_parallel" else draws.starts[0]
    return built.init(start, clone(draws.generator)).momenta
