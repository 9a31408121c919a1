"""Temperature grids and the paper's parallel SGHMC: what a grid costs against one cell.

- **Laplace grid**: a workflow of ``map`` and ``laplace_diag_ggn`` (from map) on the
  digits MLP at five temperatures against the same at one temperature, run through
  :func:`bayesflow.api.run` with an in-memory tracker and no report, so the planner's
  sharing (one MAP fit for every temperature) is what is measured. Cost is the summed
  compute seconds of the fit stages (and, separately, fit plus evaluate stages).
- **SGHMC grid**: five temperatures × two seeds as ten vectorised chains of ONE engine
  call, against one chain. This needs per-chain temperatures (``execution.vectorize``
  in the spec); until the engine has them the case reports "not supported yet" and
  measures what the engine can already do: ten chains at one temperature against one.
- **Paper's parallel SGHMC** (Duffield et al., 2025, Table 3): 10,000 chains × 2,000 steps
  at batch size 32 on Pima. Fewer steps in ``quick`` mode (extrapolated, and marked so).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.digits import BATCH_SIZE, Epoch
from benchmarks.peers import HYPER, Stepper, bayesflow_engine, bayesflow_state
from benchmarks.problems import digits, minibatch_list, pima
from benchmarks.timing import Settings, compare, time_once

__all__ = ["GRID_TEMPERATURES", "laplace_grid", "paper_parallel_sghmc", "run", "sghmc_grid"]

GRID_TEMPERATURES = [0.001, 0.00562, 0.0316, 0.178, 1.0]  # the default workflow's
PAPER_CHAINS, PAPER_STEPS = 10_000, 2_000


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """Run a block in ``path`` (the API writes caches and reports under the cwd)."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def grid_spec(
    methods: dict[str, Any],
    temperatures: list[float],
    seeds: list[int],
    settings: Settings,
    execution: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A digits-MLP workflow of ``methods`` with no plots and no report."""
    return {
        "name": "benchmark_grid",
        "data": {"name": "sklearn_digits", "test_fraction": 0.5, "split_seed": 0},
        "model": {"name": "mlp", "hidden": [64], "activation": "relu"},
        "likelihood": {"name": "categorical"},
        "prior": {"name": "diag_normal", "variance": 0.5},
        "temperatures": temperatures,
        "seeds": seeds,
        "methods": methods,
        "evaluate": {"n_samples": 10 if settings.smoke else 50},
        "plots": [],
        "report": {"enabled": False},
        "execution": {"device": settings.device, "threads": settings.threads, **(execution or {})},
    }


def run_grid(spec: dict[str, Any]) -> dict[str, Any]:
    """Run a workflow in a fresh folder (so nothing is cached); stage seconds by kind."""
    from bayesflow import api
    from bayesflow.tracking import InMemoryTracker

    with (
        tempfile.TemporaryDirectory(prefix="bayesflow-bench-") as folder,
        working_directory(Path(folder)),
    ):
        result = api.run(api.load(spec), tracker=InMemoryTracker(Path(folder) / "artifacts"))
    if not result.outcome.ok:
        raise RuntimeError(f"benchmark workflow failed: {result.outcome.errors}")
    by_kind: dict[str, float] = {}
    for name, seconds in result.outcome.seconds.items():
        kind = name.split("/", 1)[0]
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
    return {"wall_s": result.seconds, "stage_s": by_kind, "stages": len(result.outcome.seconds)}


def laplace_grid(settings: Settings) -> dict[str, Any]:
    """Five Laplace temperatures against one: one MAP fit is shared by all of them."""
    epochs = {"full": 150, "quick": 30, "smoke": 1}[settings.mode]
    methods = {
        "map": {
            "engine": "map",
            "optimizer": {"name": "adam", "lr": HYPER["map"]["lr"]},
            "epochs": epochs,
            "batch_size": BATCH_SIZE,
        },
        "laplace": {"engine": "laplace_diag_ggn", "from": "map"},
    }
    temperatures = GRID_TEMPERATURES[-2:] if settings.smoke else GRID_TEMPERATURES
    one = run_grid(grid_spec(methods, [1.0], [0], settings))
    grid = run_grid(grid_spec(methods, temperatures, [0], settings))

    def cost(result: dict[str, Any], kinds: tuple[str, ...]) -> float:
        return sum(result["stage_s"].get(kind, 0.0) for kind in kinds)

    return {
        "temperatures": len(temperatures),
        "map_epochs": epochs,
        "one": one,
        "grid": grid,
        "fit_ratio": cost(grid, ("fit", "curvature")) / cost(one, ("fit", "curvature")),
        "fit_evaluate_ratio": cost(grid, ("fit", "curvature", "evaluate"))
        / cost(one, ("fit", "curvature", "evaluate")),
    }


def vectorize_supported() -> bool:
    """Whether specs can ask for vectorised grids (per-chain temperatures and seeds)."""
    from bayesflow.spec.settings import ExecutionSpec

    return "vectorize" in ExecutionSpec.model_fields


def sghmc_grid(settings: Settings) -> dict[str, Any]:
    """5 temperatures × 2 seeds as ten chains of one engine call, against one chain."""
    epochs = {"full": 20, "quick": 5, "smoke": 1}[settings.mode]
    method = {
        "engine": "sghmc",
        "lr": HYPER["sghmc"]["lr"],
        "alpha": HYPER["sghmc"]["alpha"],
        "epochs": epochs,
        "batch_size": BATCH_SIZE,
        "keep": "last",
    }
    result: dict[str, Any] = {"cells": 10, "epochs": epochs, "supported": vectorize_supported()}
    if result["supported"]:
        one = run_grid(grid_spec({"sghmc": method}, [1.0], [0], settings))
        grid = run_grid(
            grid_spec({"sghmc": method}, GRID_TEMPERATURES, [0, 1], settings, {"vectorize": True})
        )
        result.update(one=one, grid=grid, ratio=(grid["stage_s"].get("fit_group", 0.0) + grid["stage_s"]["fit"]) / one["stage_s"]["fit"])
        return result
    # Not supported yet: what one engine call with ten chains at ONE temperature costs
    # against one chain, per epoch; the grid would cost about this once chains can carry
    # their own temperatures. Run as ten separate cells it costs about ten chains' time.
    setup = digits(settings.device)
    batches = minibatch_list(setup, BATCH_SIZE)
    contenders: dict[str, Callable[[], Any]] = {}
    for count in (1, 10):
        engine = bayesflow_engine(setup, "sghmc", batch_size=BATCH_SIZE, chains=count)
        contenders[f"chains_{count}"] = Epoch(
            Stepper(engine.update, bayesflow_state(engine, setup), batches)
        )
    timings = compare(contenders, settings, count=5, warmup=2)
    result.update(
        note="not supported yet: chains of one engine call share one temperature "
        "(no execution.vectorize); ratio is 10 chains at one temperature against 1 chain",
        one_chain_epoch_s=timings["chains_1"].median,
        ten_chains_epoch_s=timings["chains_10"].median,
        ratio=timings["chains_10"].median / timings["chains_1"].median,
        serial_ratio=10.0,
    )
    return result


def paper_parallel_sghmc(settings: Settings) -> dict[str, Any]:
    """10,000 SGHMC chains × 2,000 steps at batch size 32 on Pima, wall time."""
    chains = 10 if settings.smoke else PAPER_CHAINS
    steps = {"full": PAPER_STEPS, "quick": 200, "smoke": 5}[settings.mode]
    setup = pima(settings.device)
    batches = minibatch_list(setup, 32, epochs=math.ceil(steps * 32 / setup.num_data))
    engine = bayesflow_engine(setup, "sghmc", batch_size=32, chains=chains)
    holder: dict[str, Any] = {}
    init_s = time_once(lambda: holder.update(state=bayesflow_state(engine, setup)), settings.device)
    stepper = Stepper(engine.update, holder["state"], batches)

    def run_steps() -> None:
        for _ in range(steps):
            stepper()

    steps_s = time_once(run_steps, settings.device)
    # Steps cost the same whatever their number, so time scales linearly in steps; it does
    # not in chains (they are vectorised), so a run with fewer chains gives no estimate.
    full_s = init_s + steps_s * PAPER_STEPS / steps if chains == PAPER_CHAINS else None
    return {
        "chains": chains,
        "steps": steps,
        "batch_size": 32,
        "init_s": init_s,
        "steps_s": steps_s,
        "seconds_per_step": steps_s / steps,
        "wall_s": init_s + steps_s,
        "paper_wall_s": full_s,
        "extrapolated": chains != PAPER_CHAINS or steps != PAPER_STEPS,
    }


def run(settings: Settings) -> dict[str, Any]:
    """Every grid measurement."""
    return {
        "laplace_grid": laplace_grid(settings),
        "sghmc_grid": sghmc_grid(settings),
        "paper_parallel_sghmc": paper_parallel_sghmc(settings),
    }
