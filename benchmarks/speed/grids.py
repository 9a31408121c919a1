"""Temperature grids and the paper's parallel SGHMC: what a grid costs against one cell.

Grids run through :func:`bayesflow.api.run` (an in-memory tracker, no plots, no report,
a fresh folder each time, so nothing is cached), and every stage they run is counted,
by kind: ``fit_group`` (one vectorised engine call for a whole grid), ``fit`` (per cell;
in a group, splitting the group's result), ``curvature`` and ``evaluate``. A grid is
timed against one cell interleaved (one, grid, one, grid, ...) after one untimed run of
each; the ratio is the median of the paired repeats.

- **SGHMC grid**: five temperatures × two seeds as ten chains of ONE engine call
  (``execution.vectorize: true``) against one chain, on the digits MLP with the default
  workflow's parallel SGHMC settings (150 epochs of batch 128 in ``full`` mode). Beside
  it, per step and interleaved: the grid's engine (ten chains, one temperature each)
  against one chain, and the hand-written floor (:class:`benchmarks.speed.floor.FloorMLP`)
  with ten chains against one: what ten chains cost on this model at the floor.
- **Laplace grid**: ``map`` and ``laplace_diag_ggn`` (from map) at five temperatures
  against one: the planner shares one MAP fit and one curvature pass.
- **Paper's parallel SGHMC** (Duffield et al., 2025, Table 3): 10,000 chains × 2,000 steps
  at batch size 32 on Pima through ``bayesflow.engines.fit.fit``, the loop a fit stage
  runs (chain starts, each chain's own minibatch order every epoch, the per-epoch
  checks). The loop runs whole epochs, 84 of 24 steps (2,016 steps, reported as is);
  ``quick`` runs 9 epochs and extrapolates the steps (marked so).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.common.peers import HYPER, Stepper, bayesflow_engine, bayesflow_state
from benchmarks.common.problems import digits, pima
from benchmarks.common.timing import (
    MACHINE_THREADS,
    Settings,
    Timing,
    compare,
    load_average,
    paired_ratio,
    repeat,
    time_once,
)
from benchmarks.speed.digits import BATCH_SIZE

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


def repeated_pair(
    one_spec: dict[str, Any], grid_spec_: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    """One cell and the grid, each run once untimed, then ``repeats`` times interleaved."""
    repeats = {"full": 3, "quick": 2, "smoke": 1}[settings.mode]
    if not settings.smoke:
        run_grid(one_spec), run_grid(grid_spec_)  # warm-up: imports, allocator, caches
    ones, grids = [], []
    for _ in range(repeats):
        ones.append(run_grid(one_spec))
        grids.append(run_grid(grid_spec_))
    return {"one": ones, "grid": grids}


def stage_cost(result: dict[str, Any], kinds: tuple[str, ...] | None = None) -> float:
    """Seconds of a run's stages of ``kinds`` (every stage when None)."""
    stages = result["stage_s"]
    return sum(seconds for kind, seconds in stages.items() if kinds is None or kind in kinds)


def summarise(pair: dict[str, Any], fit_kinds: tuple[str, ...]) -> dict[str, Any]:
    """Median stage seconds by kind of each side and the paired ratios."""

    def median_stages(results: list[dict[str, Any]]) -> dict[str, float]:
        kinds = {kind for result in results for kind in result["stage_s"]}
        return {
            kind: statistics.median(result["stage_s"].get(kind, 0.0) for result in results)
            for kind in sorted(kinds)
        }

    def ratio(kinds: tuple[str, ...] | None) -> dict[str, float]:
        ratios = [
            stage_cost(grid, kinds) / stage_cost(one, kinds)
            for one, grid in zip(pair["one"], pair["grid"])
        ]
        return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}

    return {
        "one_stage_s": median_stages(pair["one"]),
        "grid_stage_s": median_stages(pair["grid"]),
        "one_total_s": statistics.median(stage_cost(one) for one in pair["one"]),
        "grid_total_s": statistics.median(stage_cost(grid) for grid in pair["grid"]),
        "repeats": len(pair["one"]),
        "fit_ratio": ratio(fit_kinds),
        "total_ratio": ratio(None),
        "runs": pair,
    }


def sghmc_grid(settings: Settings) -> dict[str, Any]:
    """5 temperatures × 2 seeds as ten chains of one engine call, against one chain."""
    epochs = {"full": 150, "quick": 20, "smoke": 1}[settings.mode]
    method = {
        "engine": "sghmc",
        "lr": HYPER["sghmc"]["lr"],
        "alpha": HYPER["sghmc"]["alpha"],
        "epochs": epochs,
        "batch_size": BATCH_SIZE,
        "keep": "last",
    }
    load = load_average()
    one = grid_spec({"sghmc": method}, [1.0], [0], settings)
    grid = grid_spec({"sghmc": method}, GRID_TEMPERATURES, [0, 1], settings, {"vectorize": True})
    result = summarise(repeated_pair(one, grid, settings), ("fit_group", "fit"))
    result.update(cells=10, epochs=epochs, load_average=[load, load_average()])
    result["per_step"] = grid_steps(settings)
    # The target is judged on every stage the grid costs (fit_group + fit + evaluate).
    result["ratio"] = result["total_ratio"]["median"]
    return result


def grid_steps(settings: Settings) -> dict[str, Any]:
    """Seconds per step: the grid's engine (10 chains, each its own T and minibatch
    order) and the 10-chain floor, each against its one chain, interleaved."""
    import torch

    from bayesflow.methods import METHODS
    from bayesflow.temperature import ChainTempering
    from benchmarks.speed.chains import chain_batches
    from benchmarks.speed.floor import FloorMLP, check_gradient

    setup = digits(settings.device)
    temperatures = tuple(GRID_TEMPERATURES) * 2
    method = METHODS.get("sghmc")
    config = method.spec.model_validate(
        {
            "engine": "sghmc",
            "lr": HYPER["sghmc"]["lr"],
            "alpha": HYPER["sghmc"]["alpha"],
            "batch_size": BATCH_SIZE,
            "keep": "last",
        }
    )
    tempering = ChainTempering(temperatures, setup.num_data, "posterior")
    grid = method.builder()(setup.problem, tempering, config)
    starts = torch.stack(
        [setup.problem.init_params(torch.Generator().manual_seed(k)) for k in range(10)]
    ).to(setup.problem.device)
    grid_state = grid.init(starts, torch.Generator(device=setup.problem.device).manual_seed(0))
    one = bayesflow_engine(setup, "sghmc", batch_size=BATCH_SIZE)
    one_state = bayesflow_state(one, setup)
    steppers: dict[str, Any] = {
        "bayesflow_one": Stepper(one.update, one_state, chain_batches(setup, BATCH_SIZE, 1)),
        "bayesflow_grid": Stepper(
            grid.update, grid_state, chain_batches(setup, BATCH_SIZE, grid.streams)
        ),
    }
    hyper = {"lr": HYPER["sghmc"]["lr"], "alpha": HYPER["sghmc"]["alpha"]}
    for name, state, streams in (("floor_one", one_state, 1), ("floor_ten", grid_state, 10)):
        batches = chain_batches(setup, BATCH_SIZE, streams)
        steppers[name] = FloorMLP(setup, state.params, state.momenta, batches, **hyper)
        check_gradient(steppers[name], setup, state.params, batches[0])
    timings = compare(steppers, settings)
    return {
        "timings": {name: timing.as_dict() for name, timing in timings.items()},
        "bayesflow_ratio": paired_ratio(timings["bayesflow_grid"], timings["bayesflow_one"]),
        "floor_ratio": paired_ratio(timings["floor_ten"], timings["floor_one"]),
    }


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
    load = load_average()
    one = grid_spec(methods, [1.0], [0], settings)
    grid = grid_spec(methods, temperatures, [0], settings)
    result = summarise(repeated_pair(one, grid, settings), ("fit", "curvature"))
    result.update(
        temperatures=len(temperatures), map_epochs=epochs, load_average=[load, load_average()]
    )
    return result


def paper_parallel_sghmc(settings: Settings) -> dict[str, Any]:
    """10,000 SGHMC chains × 2,000 steps at batch size 32 on Pima, wall time of ``fit``:
    with torch's threads as `bayesflow run` has them on this machine (one per core; the
    target's figure), and with the contenders' threads (``--threads``) when they differ."""
    import torch

    result = paper_parallel_sghmc_at(settings, MACHINE_THREADS)
    if settings.threads != MACHINE_THREADS:
        torch.set_num_threads(settings.threads)
        result["at_contender_threads"] = paper_parallel_sghmc_at(settings, settings.threads)
    torch.set_num_threads(settings.threads)
    return result


def paper_parallel_sghmc_at(settings: Settings, threads: int) -> dict[str, Any]:
    """Table 3's run with ``threads`` torch threads."""
    import torch

    torch.set_num_threads(threads)

    from bayesflow.engines.fit import fit, minibatches

    chains = 10 if settings.smoke else PAPER_CHAINS
    epochs = {"full": math.ceil(PAPER_STEPS * 32 / 768), "quick": 9, "smoke": 1}[settings.mode]
    repeats = {"full": 3, "quick": 2, "smoke": 1}[settings.mode]
    setup = pima(settings.device)
    load = load_average()

    def run_fit(passes: int) -> Any:
        engine = bayesflow_engine(setup, "sghmc", batch_size=32, chains=chains, epochs=passes)
        generator = torch.Generator(device=setup.problem.device).manual_seed(0)
        return fit(engine, setup.start, setup.inputs, setup.targets, generator)

    time_once(lambda: run_fit(1), settings.device)  # warm-up: one epoch, untimed
    engine = bayesflow_engine(setup, "sghmc", batch_size=32, chains=chains, epochs=epochs)
    generator = torch.Generator(device=setup.problem.device).manual_seed(0)
    init = Timing([time_once(lambda: engine.init(setup.start, generator), settings.device)])
    holder: dict[str, Any] = {}
    walls = Timing(
        [
            time_once(lambda: holder.update(result=run_fit(epochs)), settings.device)
            for _ in range(repeats)
        ]
    )
    steps = holder["result"].steps
    seconds_per_step = (walls.median - init.median) / steps
    streams = bayesflow_engine(setup, "sghmc", batch_size=32, chains=chains).streams

    def one_epoch_of_batches() -> None:
        for _ in minibatches(setup.inputs, setup.targets, 32, generator, streams):
            pass

    # The share of the minibatch stream (K orders per epoch and each step's gather).
    stream = repeat(one_epoch_of_batches, settings, repeats=3)
    extrapolated = chains != PAPER_CHAINS or steps < PAPER_STEPS
    return {
        "threads": threads,
        "chains": chains,
        "epochs": epochs,
        "steps": steps,
        "batch_size": 32,
        "init_s": init.median,
        "wall": walls.as_dict(),
        "wall_s": walls.median,
        "seconds_per_step": seconds_per_step,
        "minibatch_stream_s_per_epoch": stream.median,
        "minibatch_stream_s": stream.median * epochs,
        # Measured when the fit ran the paper's steps (or more); else its steps scaled.
        "paper_wall_s": (
            None
            if chains != PAPER_CHAINS
            else walls.median
            if not extrapolated
            else init.median + seconds_per_step * PAPER_STEPS
        ),
        "extrapolated": extrapolated,
        "load_average": [load, load_average()],
    }


def run(settings: Settings) -> dict[str, Any]:
    """Every grid measurement."""
    return {
        "sghmc_grid": sghmc_grid(settings),
        "laplace_grid": laplace_grid(settings),
        "paper_parallel_sghmc": paper_parallel_sghmc(settings),
    }
