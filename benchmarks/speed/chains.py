"""K parallel SGHMC chains on Pima: bayesflow against three contenders, per step.

For each batch size (full, 32) and each K, one step of K chains is timed for:

- ``bayesflow``: ``chains: K``, one engine over a (K, d) state;
- ``posteriors_stacked``: posteriors' SGHMC over one (K, d) state whose log posterior is
  the chains' sum (:func:`benchmarks.common.peers.stacked_transform`), flat and in place, its
  fastest form: the stronger peer (DESIGN.md);
- ``posteriors_looped``: posteriors' documented use, a Python loop over K states of named
  tensors; above :data:`LOOP_LIMIT` chains it is timed on that many and scaled (a loop
  costs the same per chain), and the row says so;
- ``floor``: the hand-written flat-tensor loop (:mod:`benchmarks.speed.floor`).

All four start from the same (K, d) parameters and momenta and step through the same
batches: at full batch the whole data set, shared by every chain; at batch 32 bayesflow's
default, independent chains (``minibatches: independent``): each chain its own minibatch
order, made by ``bayesflow.engines.fit.minibatches`` with ``engine.streams`` orders
(:data:`BATCHES_KEPT` of them, made once outside the clock and cycled).
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Any

import torch

from bayesflow.engines.base import Batch
from benchmarks.common.peers import (
    HYPER,
    LoopStepper,
    Stepper,
    bayesflow_engine,
    bayesflow_state,
    peer_state,
    peer_transform,
    stacked_transform,
)
from benchmarks.common.problems import Setup
from benchmarks.common.timing import Settings, Timing, compare, load_average, paired_ratio
from benchmarks.speed.floor import FloorSGHMC, check_gradient

__all__ = ["BATCHES_KEPT", "BATCH_SIZES", "CHAIN_COUNTS", "LOOP_LIMIT", "chain_batches", "run"]

BATCH_SIZES: dict[str, int | None] = {"full": None, "32": 32}
CHAIN_COUNTS = {
    "full": (1, 10, 100, 1000, 10_000),
    "quick": (1, 100, 10_000),
    "smoke": (1, 10),
}
# posteriors' loop over chains is timed on at most this many chains.
LOOP_LIMIT = {"full": 100, "quick": 50, "smoke": 10}
# Minibatches made ahead per row: at K = 10,000 chains of their own batches of 32, one
# batch is 10 MB of inputs, so a whole epoch (24 batches) would be 250 MB.
BATCHES_KEPT = 4


def chain_batches(setup: Setup, batch_size: int | None, streams: int) -> list[Batch]:
    """The first :data:`BATCHES_KEPT` batches of an epoch as bayesflow's fit makes them."""
    from bayesflow.engines.fit import minibatches

    generator = torch.Generator(device=setup.inputs.device).manual_seed(0)
    stream = minibatches(setup.inputs, setup.targets, batch_size, generator, streams)
    return list(itertools.islice(stream, BATCHES_KEPT))


def contenders(
    setup: Setup, settings: Settings, batch_size: int | None, count: int
) -> tuple[dict[str, Any], int, float]:
    """The four steppers of one row, the number of chains looped, and the floor's
    largest gradient difference from bayesflow's."""
    engine = bayesflow_engine(setup, "sghmc", batch_size=batch_size, chains=count)
    state = bayesflow_state(engine, setup)
    batches = chain_batches(setup, batch_size, engine.streams)
    hyper = HYPER["sghmc"]
    floor = FloorSGHMC(
        setup, state.params, state.momenta, batches, lr=hyper["lr"], alpha=hyper["alpha"]
    )
    difference = check_gradient(floor, setup, state.params, batches[0])
    stacked = stacked_transform(setup)
    stacked_state = peer_state(stacked, setup, state.params, momenta=state.momenta, flat=True)
    looped = min(count, LOOP_LIMIT[settings.mode])
    transform = peer_transform(setup, "sghmc")
    loop_states = [
        peer_state(transform, setup, state.params[k], momenta=state.momenta[k])
        for k in range(looped)
    ]
    steppers = {
        "bayesflow": Stepper(engine.update, state, batches),
        "posteriors_stacked": Stepper(
            partial(stacked.update, inplace=True), stacked_state, batches
        ),
        "posteriors_looped": LoopStepper(transform.update, loop_states, batches),
        "floor": floor,
    }
    return steppers, looped, difference


def chain_row(
    label: str, count: int, looped: int, timings: dict[str, Timing], difference: float
) -> dict[str, Any]:
    """One row: chain-steps per second of each contender and bayesflow's ratios."""
    ours = timings["bayesflow"]
    per_second = {
        name: (looped if name == "posteriors_looped" else count) / timing.median
        for name, timing in timings.items()
    }
    loop_speedup = paired_ratio(timings["posteriors_looped"], ours)
    scale = count / looped
    return {
        "batch": label,
        "chains": count,
        "posteriors_chains_timed": looped,
        "estimated": looped < count,
        "chain_steps_per_s": per_second,
        "bayesflow_chain_steps_per_s": per_second["bayesflow"],
        "posteriors_chain_steps_per_s": per_second["posteriors_looped"],
        # bayesflow's speed-up (other's time / bayesflow's, > 1: bayesflow faster).
        "speedup": loop_speedup["median"] * scale,
        "speedup_vs_stacked": paired_ratio(timings["posteriors_stacked"], ours),
        # bayesflow's time over the floor's (< 1.3 is the target).
        "ratio_vs_floor": paired_ratio(ours, timings["floor"]),
        "floor_gradient_difference": difference,
        "timings": {name: timing.as_dict() for name, timing in timings.items()},
    }


def run(setup: Setup, settings: Settings) -> list[dict[str, Any]]:
    """Every row: each batch size and each K of :data:`CHAIN_COUNTS`."""
    rows = []
    for label, batch_size in BATCH_SIZES.items():
        for count in CHAIN_COUNTS[settings.mode]:
            load = load_average()
            steppers, looped, difference = contenders(setup, settings, batch_size, count)
            timings = compare(steppers, settings)
            row = chain_row(label, count, looped, timings, difference)
            row["load_average"] = [load, load_average()]
            rows.append(row)
            del steppers
    return rows
