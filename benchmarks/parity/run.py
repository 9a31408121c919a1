"""Peer parity: bayesflow and posteriors fitted alike, scored alike, seed by seed (issue 14).

    python -m benchmarks.parity.run                 # 6 seeds, 50 epochs: ~15 min on the 2-core CPU
    python -m benchmarks.parity.run --full          # the issue's 100 epochs, 10 seeds
    python -m benchmarks.parity.run --quick         # 2 seeds, 5 epochs: a check that it runs
    python -m benchmarks.parity.run --seeds 8 --epochs 30 --methods map vi_diag --temperatures 1

Both tools get the same data split, model, prior, likelihood, hyper-parameters, initial
weights and minibatch orders (:mod:`benchmarks.parity.problem`, :mod:`benchmarks.parity.fits`);
both posteriors are scored by the same code (:func:`bayesflow.evaluate.evaluate`: the
probability-averaged predictive of 50 parameter samples, drawn with the same generator for
both tools). Per method × temperature the table gives each tool's test NLL and accuracy as
mean ± standard error over seeds and the paired gap (:mod:`benchmarks.parity.stats`). It
writes ``<out>/parity-<date>[-mode].json`` and, except with ``--quick``, the results block of
docs/parity.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from benchmarks import RESULTS, ROOT
from benchmarks.parity.fits import METHODS, Fit, Settings, fit_bayesflow, serial_schedule
from benchmarks.parity.peer import fit_posteriors
from benchmarks.parity.problem import (
    DATASET,
    HIDDEN,
    PRIOR_VARIANCE,
    Digits,
    Draws,
    batches,
    check_gradients,
    draw,
    load,
    plain_torch_starts,
)
from benchmarks.parity.report import (
    END,
    START,
    commit,
    machine,
    render,
    replace_block,
    versions,
    write,
)
from benchmarks.parity.stats import METRICS, TARGETS, describe, paired_gap, table

__all__ = ["END", "MODES", "START", "main", "run"]

# (seeds, epochs) of each mode. The default fits the ~10-15 minute budget of the shared
# 2-core machine (measured: about 2 minutes per seed at 50 epochs, under a load of 6);
# --full is the 100 epochs with 10 seeds (about 45 minutes there).
MODES = {"quick": (2, 5), "default": (6, 50), "full": (10, 100)}
EVALUATION_SAMPLES = 50  # the posteriors paper's parameter samples per predictive
TOOLS = ("bayesflow", "posteriors")
# Each tool's fit: (digits, method, T, draws, settings, [seed,] mode=...) -> {T: Fit}.
FITS: dict[str, Callable[..., dict[float, Fit]]] = {
    "bayesflow": fit_bayesflow,
    "posteriors": fit_posteriors,
}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.parity.run", description=__doc__.split("\n")[0]
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="2 seeds, 5 epochs")
    size.add_argument("--full", action="store_true", help="10 seeds, the issue's 100 epochs")
    parser.add_argument("--seeds", type=int, help="number of seeds (0..N-1); overrides the mode's")
    parser.add_argument("--epochs", type=int, help="epochs of MAP, VI and parallel SGHMC")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.1, 1.0])
    parser.add_argument(
        "--peer-chains",
        choices=("stacked", "loop"),
        default="stacked",
        help="posteriors' parallel chains as one stacked tree or ten states",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both tools)")
    parser.add_argument("--out", type=Path, default=RESULTS / "parity")
    parser.add_argument(
        "--doc",
        type=Path,
        help="the doc whose results block to replace (default docs/parity.md, none with --quick)",
    )
    parser.add_argument("--no-doc", action="store_true", help="write no doc")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="run nothing: rewrite the doc's results block from a results file",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, write its JSON (and doc block), print the table."""
    args = parse(argv)
    if args.render is not None:
        results = json.loads(args.render.read_text())
        replace_block(args.doc or ROOT / "docs" / "parity.md", render(results, args.render))
        return results
    mode = "quick" if args.quick else "full" if args.full else "default"
    seeds, epochs = MODES[mode]
    settings = Settings(
        epochs=args.epochs or epochs,
        peer_chains=args.peer_chains,
        temperatures=tuple(args.temperatures),
    )
    torch.set_num_threads(args.threads)
    command = "python -m benchmarks.parity.run" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    results = run(
        settings, list(range(args.seeds or seeds)), list(args.methods), mode, args.threads
    )
    results["command"] = command
    path = write(results, args.out)
    print(table(results["cells"]))
    print(f"\nwrote {path} ({results['runtime_seconds']:.0f} s)")
    doc = None if args.no_doc else args.doc or (None if args.quick else ROOT / "docs" / "parity.md")
    if doc is not None:
        replace_block(doc, render(results, path))
    return results


class Collected:
    """Per-seed scores as they come in: cells by (method, T), the peer's variants, checks."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
        self.variants: dict[tuple[str, float], list[dict[str, Any]]] = {}
        self.checks: dict[str, Any] = {"map_max_abs_difference": []}


def run(
    settings: Settings,
    seeds: list[int],
    methods: list[str],
    mode: str = "default",
    threads: int = 1,
) -> dict[str, Any]:
    """Fit and score every method with both tools on every seed; the results document."""
    began = time.perf_counter()
    load_start = list(os.getloadavg())
    digits = load()
    if "laplace_diag_ggn" in methods and "map" not in methods:
        methods = ["map", *methods]  # Laplace starts from each tool's MAP
    collected = Collected()
    for seed in seeds:
        single = draw(digits, seed, 1, serial_schedule(settings, digits.num_data)[0])
        chains = (
            draw(digits, seed, settings.chains, settings.epochs)
            if "sghmc_parallel" in methods
            else None
        )
        if seed == seeds[0]:
            collected.checks.update(first_checks(digits, seed, single, chains, settings))
        fit_seed(digits, seed, single, chains, settings, methods, collected)
    return {
        "benchmark": "parity",
        "mode": mode,
        "date": time.strftime("%Y-%m-%d"),
        "time": time.strftime("%H:%M %Z"),
        "commit": commit(),
        "machine": machine(load_start, threads),
        "versions": versions(),
        "settings": settings_record(settings, seeds, methods, digits),
        "targets": TARGETS,
        "checks": collected.checks,
        "cells": [cell(method, t, rows) for (method, t), rows in collected.records.items()],
        "variants": [
            {
                "name": name,
                "temperature": t,
                "per_seed": rows,
                "summary": {metric: describe([row[metric] for row in rows]) for metric in METRICS},
            }
            for (name, t), rows in collected.variants.items()
        ],
        "runtime_seconds": time.perf_counter() - began,
    }


def first_checks(
    digits: Digits, seed: int, single: Draws, chains: Draws | None, settings: Settings
) -> dict[str, Any]:
    """Before any fit: the two log posteriors' gradients agree, and docs/design.md's
    plain-torch recipe rebuilds the seed's starts (issue 14, item 3)."""
    first = batches(digits, single.orders[0], settings.batch_size)[0]
    plain = plain_torch_starts(seed, settings.chains)
    return {
        "gradient_max_abs_difference": check_gradients(digits, single.starts[0], first),
        "plain_torch_starts_equal": bool(
            torch.equal(plain[:1], single.starts.cpu())
            and (chains is None or torch.equal(plain, chains.starts.cpu()))
        ),
    }


def fit_seed(
    digits: Digits,
    seed: int,
    single: Draws,
    chains: Draws | None,
    settings: Settings,
    methods: list[str],
    collected: Collected,
) -> None:
    """Every method with both tools on one seed's draws; MAP and Laplace once for every T."""
    modes: dict[str, torch.Tensor] = {}
    for method in [m for m in METHODS if m in methods]:
        draws = chains if method == "sghmc_parallel" else single
        assert draws is not None
        shared = method in ("map", "laplace_diag_ggn")  # one fit serves every T
        for temperature in settings.temperatures[:1] if shared else settings.temperatures:
            fits = {}
            for tool in TOOLS:
                extra = {"seed": seed} if tool == "posteriors" else {}
                fits[tool] = FITS[tool](
                    digits, method, temperature, draws, settings, mode=modes.get(tool), **extra
                )
                report(seed, method, temperature, tool, fits[tool])
            if method == "map":
                modes = {tool: mean(fits[tool][temperature]) for tool in TOOLS}
                collected.checks["map_max_abs_difference"].append(
                    float((modes["bayesflow"] - modes["posteriors"]).abs().max())
                )
            collect(digits, seed, method, fits, collected)


def mean(fit: Fit) -> torch.Tensor:
    """A point or Gaussian fit's mean (the mode Laplace starts from)."""
    assert fit.posterior.mean is not None, "a MAP fit has a mean"
    return fit.posterior.mean


def collect(
    digits: Digits, seed: int, method: str, fits: dict[str, dict[float, Fit]], collected: Collected
) -> None:
    """Score both tools' fits (one per temperature) and the peer's variants."""
    for temperature in fits["bayesflow"]:
        key = (method, None if method == "map" else temperature)
        scored = {tool: score(digits, fits[tool][temperature], seed) for tool in TOOLS}
        collected.records.setdefault(key, []).append({"seed": seed, **scored})
        for name, posterior in (fits["posteriors"][temperature].variants or {}).items():
            collected.variants.setdefault((name, temperature), []).append(
                {"seed": seed, **evaluate(digits, posterior, seed)}
            )


def report(seed: int, method: str, temperature: float, tool: str, fits: dict[float, Fit]) -> None:
    """One progress line per fit, on stderr."""
    fit = next(iter(fits.values()))
    print(
        f"seed {seed} {method} T={temperature:g} {tool}: {fit.seconds:.1f} s, {fit.steps} steps",
        file=sys.stderr,
        flush=True,
    )


def evaluate(digits: Digits, posterior: Any, seed: int) -> dict[str, float]:
    """bayesflow's predictive metrics of ``posterior`` on the test split: 50 parameter samples,
    probabilities averaged; the same generator for both tools (the same normal draws)."""
    from bayesflow.evaluate import evaluate as predictive

    generator = torch.Generator(device=digits.problem.device).manual_seed(seed)
    metrics = predictive(
        digits.problem,
        digits.likelihood,
        posterior,
        digits.x_test,
        digits.y_test,
        EVALUATION_SAMPLES,
        generator,
    )
    return {name: float(metrics[name]) for name in (*METRICS, "test_ece")}


def score(digits: Digits, fit: Fit, seed: int) -> dict[str, Any]:
    """A fit's test metrics, wall seconds and steps."""
    return {**evaluate(digits, fit.posterior, seed), "seconds": fit.seconds, "steps": fit.steps}


def cell(method: str, temperature: float | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One method × temperature: per-seed values, each tool's spread and the paired gaps."""
    values = {
        tool: {metric: [row[tool][metric] for row in rows] for metric in (*METRICS, "seconds")}
        for tool in TOOLS
    }
    summary: dict[str, Any] = {
        tool: {metric: describe(series) for metric, series in values[tool].items()}
        for tool in TOOLS
    }
    summary["gap"] = {
        metric: paired_gap(
            values["bayesflow"][metric], values["posteriors"][metric], TARGETS[metric]
        )
        for metric in METRICS
    }
    return {"method": method, "temperature": temperature, "per_seed": rows, "summary": summary}


def settings_record(
    settings: Settings, seeds: list[int], methods: list[str], digits: Digits
) -> dict[str, Any]:
    """Everything both tools were given."""
    epochs, burn_in, thin = serial_schedule(settings, digits.num_data)
    return {
        **asdict(replace(settings)),
        "seeds": seeds,
        "methods": methods,
        "serial_sghmc": {"epochs": epochs, "burn_in": burn_in, "thin": thin},
        "evaluation_samples": EVALUATION_SAMPLES,
        "dataset": DATASET,
        "train_size": digits.num_data,
        "test_size": int(digits.y_test.shape[0]),
        "model": {
            "name": "mlp",
            "hidden": HIDDEN,
            "activation": "relu",
            "dimension": digits.problem.dimension,
        },
        "prior": {"name": "diag_normal", "variance": PRIOR_VARIANCE},
        "likelihood": "categorical",
        "temperature_convention": "posterior (bayesflow T; posteriors temperature T / N)",
        "device": str(digits.problem.device),
    }


if __name__ == "__main__":
    main()
