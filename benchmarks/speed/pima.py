"""Case 1: Bayesian logistic regression on Pima, per step and across K parallel chains.

768 × 8 standardised inputs, a bernoulli likelihood, an isotropic normal prior of
variance 1, T = 1. Per step: SGHMC, diagonal VI and diagonal Laplace (GGN and empirical
Fisher) at full batch and at batch size 32, one chain, against posteriors as documented
and at its fastest. Chains: :mod:`benchmarks.speed.chains` (K chains against posteriors
stacked and looped, and the hand-written floor).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks.common.peers import (
    Stepper,
    bayesflow_engine,
    bayesflow_has,
    bayesflow_state,
    peer_state,
    peer_transform,
)
from benchmarks.common.problems import Setup, check_agreement, minibatch_list, pima
from benchmarks.common.timing import Settings, compare, load_average, paired_ratio
from benchmarks.speed import chains

__all__ = ["BATCH_SIZES", "METHODS", "comparison_row", "per_step", "run"]

METHODS = ("sghmc", "vi_diag", "laplace_diag_ggn", "laplace_diag_fisher")
BATCH_SIZES: dict[str, int | None] = {"full": None, "32": 32}
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
            load = load_average()
            timings = compare(contenders, settings)
            row = comparison_row(method, label, timings)
            row["load_average"] = [load, load_average()]
            rows.append(row)
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
        ours = timings["bayesflow"]
        fastest = min(peers, key=peers.__getitem__)
        row["bayesflow_s"] = ours.median
        row["bayesflow_spread"] = ours.spread
        # Ratios of the paired repeats (see benchmarks.common.timing.paired_ratio).
        row["ratio_paired"] = paired_ratio(ours, timings["posteriors"])
        row["ratio_best_paired"] = paired_ratio(ours, timings[fastest])
        row["ratio"] = row["ratio_paired"]["median"]
        row["ratio_best"] = row["ratio_best_paired"]["median"]
    else:
        row["bayesflow_s"] = None
        row["note"] = f"bayesflow has no {method} engine"
    return row


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
        "chains": chains.run(setup, settings),
    }
