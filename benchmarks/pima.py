"""Case 1: Bayesian logistic regression on Pima, per step and across K parallel chains.

768 × 8 standardised inputs, a bernoulli likelihood, an isotropic normal prior of
variance 1, T = 1. Per step: SGHMC, diagonal VI and diagonal Laplace (GGN and empirical
Fisher) at full batch and at batch size 32. Chains: SGHMC chain-steps per second with K
chains, bayesflow's ``chains: K`` (one (K, d) tensor, ``vmap`` over chains) against
posteriors' way, a Python loop over K states; above :data:`LOOP_LIMIT` chains the loop is
timed on a subset and scaled (it costs the same per chain, so chain-steps per second do
not depend on K), and the row says so.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks.peers import (
    LoopStepper,
    Stepper,
    bayesflow_engine,
    bayesflow_has,
    bayesflow_state,
    peer_state,
    peer_transform,
)
from benchmarks.problems import Setup, check_agreement, minibatch_list, pima
from benchmarks.timing import Settings, compare

__all__ = ["BATCH_SIZES", "CHAIN_COUNTS", "LOOP_LIMIT", "METHODS", "chains", "per_step", "run"]

METHODS = ("sghmc", "vi_diag", "laplace_diag_ggn", "laplace_diag_fisher")
BATCH_SIZES: dict[str, int | None] = {"full": None, "32": 32}
CHAIN_COUNTS = {"full": (1, 10, 100, 1000), "quick": (1, 10, 100, 1000), "smoke": (1, 10)}
# posteriors' loop over chains is timed on at most this many chains.
LOOP_LIMIT = {"full": 100, "quick": 50, "smoke": 10}
# The posteriors variants timed per step: its documented use (a tree of named tensors, a
# new state per step) and its fastest one here (one flat tensor, updated in place).
PEER_VARIANTS = {"posteriors": (False, False), "posteriors_flat_inplace": (True, True)}


def peer_stepper(
    setup: Setup, method: str, batches: list[Any], flat: bool, inplace: bool, momenta: Any
) -> Stepper:
    """A posteriors transform stepping from the shared start."""
    transform = peer_transform(setup, method, flat=flat)
    state = peer_state(transform, setup, setup.start, momenta=momenta, flat=flat)
    return Stepper(partial(transform.update, inplace=inplace), state, batches)


def per_step(setup: Setup, settings: Settings) -> list[dict[str, Any]]:
    """Seconds per update step of each method and batch size, both libraries."""
    rows = []
    for label, batch_size in BATCH_SIZES.items():
        batches = minibatch_list(setup, batch_size)
        for method in METHODS:
            contenders: dict[str, Any] = {}
            momenta = None
            if bayesflow_has(method):
                engine = bayesflow_engine(setup, method, batch_size=batch_size)
                state = bayesflow_state(engine, setup)
                momenta = state.momenta[0] if method == "sghmc" else None
                contenders["bayesflow"] = Stepper(engine.update, state, batches)
            for name, (flat, inplace) in PEER_VARIANTS.items():
                contenders[name] = peer_stepper(setup, method, batches, flat, inplace, momenta)
            timings = compare(contenders, settings)
            rows.append(comparison_row(method, label, timings))
    return rows


def comparison_row(method: str, batch: str, timings: dict[str, Any]) -> dict[str, Any]:
    """One row: each contender's median seconds and bayesflow's ratio to posteriors'."""
    seconds = {name: timing.as_dict() for name, timing in timings.items()}
    peers = {name: t.median for name, t in timings.items() if name.startswith("posteriors")}
    best_peer = min(peers.values())
    row: dict[str, Any] = {
        "method": method,
        "batch": batch,
        "posteriors_s": peers["posteriors"],
        "posteriors_best_s": best_peer,
        "timings": seconds,
    }
    if "bayesflow" in timings:
        ours = timings["bayesflow"].median
        row["bayesflow_s"] = ours
        row["ratio"] = ours / peers["posteriors"]
        row["ratio_best"] = ours / best_peer
    else:
        row["bayesflow_s"] = None
        row["note"] = f"bayesflow has no {method} engine"
    return row


def chains(setup: Setup, settings: Settings) -> list[dict[str, Any]]:
    """SGHMC chain-steps per second for K chains: vectorised against a Python loop."""
    rows = []
    for label, batch_size in BATCH_SIZES.items():
        batches = minibatch_list(setup, batch_size)
        for count in CHAIN_COUNTS[settings.mode]:
            engine = bayesflow_engine(setup, "sghmc", batch_size=batch_size, chains=count)
            state = bayesflow_state(engine, setup)
            looped = min(count, LOOP_LIMIT[settings.mode])
            transform = peer_transform(setup, "sghmc")
            states = [
                peer_state(transform, setup, state.params[k], momenta=state.momenta[k])
                for k in range(looped)
            ]
            timings = compare(
                {
                    "bayesflow": Stepper(engine.update, state, batches),
                    "posteriors": LoopStepper(transform.update, states, batches),
                },
                settings,
            )
            ours = count / timings["bayesflow"].median
            theirs = looped / timings["posteriors"].median
            rows.append(
                {
                    "batch": label,
                    "chains": count,
                    "posteriors_chains_timed": looped,
                    "estimated": looped < count,
                    "bayesflow_chain_steps_per_s": ours,
                    "posteriors_chain_steps_per_s": theirs,
                    "speedup": ours / theirs,
                    "timings": {name: timing.as_dict() for name, timing in timings.items()},
                }
            )
    return rows


def run(settings: Settings) -> dict[str, Any]:
    """Every Pima measurement."""
    setup = pima(settings.device)
    return {
        "data": {
            "rows": setup.num_data,
            "features": int(setup.inputs.shape[1]),
            "prior_variance": 1.0,
        },
        "agreement": check_agreement(setup, (setup.inputs, setup.targets)),
        "per_step": per_step(setup, settings),
        "chains": chains(setup, settings),
    }
