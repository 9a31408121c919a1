"""Case 2: the default workflow's MLP on sklearn digits, seconds per epoch of each engine.

898 training images, one hidden layer of 64 ReLU units (d = 4,810), categorical
likelihood, prior variance 0.5, minibatches of 128 (8 steps an epoch), T = 1. One epoch
is one pass over the same shuffled batches for both libraries (the shuffle is made once,
outside the clock). ``laplace_diag_ggn`` makes one curvature pass (its whole fit).
"""

from __future__ import annotations

from typing import Any

from benchmarks.common.peers import (
    Stepper,
    bayesflow_engine,
    bayesflow_has,
    bayesflow_state,
    peer_state,
    peer_transform,
)
from benchmarks.common.problems import Setup, check_agreement, digits, minibatch_list
from benchmarks.common.timing import Settings, compare, load_average
from benchmarks.speed.pima import comparison_row

__all__ = ["BATCH_SIZE", "LARGE_HIDDEN", "METHODS", "Epoch", "per_epoch", "run"]

METHODS = ("map", "vi_diag", "sghmc", "laplace_diag_ggn")
BATCH_SIZE = 128  # the default workflow's
# The larger model run on a GPU (issue 7): one hidden layer of this width (d ≈ 38,000).
LARGE_HIDDEN = 512


class Epoch:
    """One call is one pass of a :class:`Stepper` over its batches."""

    def __init__(self, stepper: Stepper) -> None:
        self.stepper = stepper

    def __call__(self) -> None:
        for _ in range(len(self.stepper.batches)):
            self.stepper()


def per_epoch(setup: Setup, settings: Settings) -> list[dict[str, Any]]:
    """Seconds per epoch of each engine against its posteriors peer."""
    # Smoke mode: one batch of 16, as posteriors' GGN builds a (k·n)² output Hessian.
    batch_size = 16 if settings.smoke else BATCH_SIZE
    batches = minibatch_list(setup, batch_size)[: 1 if settings.smoke else None]
    rows = []
    for method in METHODS:
        contenders: dict[str, Any] = {}
        momenta = None
        if bayesflow_has(method):
            engine = bayesflow_engine(setup, method, batch_size=batch_size)
            state = bayesflow_state(engine, setup)
            momenta = state.momenta[0] if method == "sghmc" else None
            contenders["bayesflow"] = Epoch(Stepper(engine.update, state, batches))
        transform = peer_transform(setup, method)
        peer = peer_state(transform, setup, setup.start, momenta=momenta)
        contenders["posteriors"] = Epoch(Stepper(transform.update, peer, batches))
        load = load_average()
        timings = compare(contenders, settings, count=5, warmup=2)
        row = comparison_row(method, str(batch_size), timings)
        row["steps_per_epoch"] = len(batches)
        row["load_average"] = [load, load_average()]
        rows.append(row)
    return rows


def run(settings: Settings, large: bool | None = None) -> dict[str, Any]:
    """Every digits measurement; on a GPU (or with ``large``) also a wider MLP."""
    setup = digits(settings.device)
    results = {
        "data": {
            "rows": setup.num_data,
            "dimension": setup.problem.dimension,
            "batch_size": 16 if settings.smoke else BATCH_SIZE,
        },
        "agreement": check_agreement(
            setup, (setup.inputs[:BATCH_SIZE], setup.targets[:BATCH_SIZE])
        ),
        "per_epoch": per_epoch(setup, settings),
    }
    if large if large is not None else settings.device.startswith("cuda"):
        wide = digits(settings.device, hidden=LARGE_HIDDEN)
        results["large"] = {
            "hidden": LARGE_HIDDEN,
            "dimension": wide.problem.dimension,
            "per_epoch": per_epoch(wide, settings),
        }
    return results
