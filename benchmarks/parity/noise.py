"""posteriors fed bayesflow's own noise: does a parity gap come from the draws or the code?

    python -m benchmarks.parity.noise                       # VI and both SGHMCs, seeds 0-2
    python -m benchmarks.parity.noise --seeds 2 --epochs 50 --methods vi_diag

The parity benchmark gives both tools the same starts and minibatch orders, but each draws
its own random numbers: SGHMC's injected noise and VI's reparameterisation draws. Here the
posteriors side gets bayesflow's draws too, from a copy of the seed's generator at the
point where bayesflow's engine takes them:

- SGHMC: posteriors adds ``√(𝒯 ε (2α − 𝒯 ε β)) · torch.randn_like(m)`` to each momentum
  leaf; ``torch.randn_like`` is replaced, for the fit, by the leaves of bayesflow's
  ``randn((K, d))`` of the same step (posteriors visits a dict's leaves in sorted key
  order, as optree does; the shapes are checked);
- VI: ``posteriors.vi.diag.diag_normal_sample`` is replaced by ``mean + sd · ε`` with ε
  bayesflow's ``randn((1, d))`` of the same step.

Everything else is posteriors' own code. If the two fits then agree, a gap in the parity
table is the spread of the draws, not a difference of the algorithms. Writes
``<out>/parity-noise-<date>-e<epochs>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from benchmarks import RESULTS
from benchmarks.parity.fits import (
    Fit,
    Settings,
    clone,
    engine,
    fit_bayesflow,
    serial_schedule,
)
from benchmarks.parity.peer import fit_posteriors
from benchmarks.parity.problem import Digits, Draws, draw, load

__all__ = ["main", "shared_noise"]

STOCHASTIC = ("vi_diag", "sghmc_serial", "sghmc_parallel")


@contextmanager
def sghmc_noise(digits: Digits, generator: torch.Generator, chains: int) -> Iterator[None]:
    """``torch.randn_like`` hands out bayesflow's per-step draws, leaf by leaf."""

    def leaves() -> Iterator[Tensor]:
        while True:
            flat = torch.randn((chains, digits.problem.dimension), generator=generator)
            tree = digits.tree(flat if chains > 1 else flat[0])
            for name in sorted(tree):
                yield tree[name]

    queue = leaves()
    original = torch.randn_like

    def randn_like(like: Tensor, **_: Any) -> Tensor:
        value = next(queue)
        assert value.shape == like.shape, f"noise {tuple(value.shape)} for {tuple(like.shape)}"
        return value.to(like)

    torch.randn_like = randn_like  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.randn_like = original


@contextmanager
def vi_noise(digits: Digits, generator: torch.Generator) -> Iterator[None]:
    """posteriors' VI samples ``mean + sd · ε`` with bayesflow's per-step ε."""
    from posteriors.vi import diag

    original = diag.diag_normal_sample

    def sample(mean: Any, sd_diag: Any, sample_shape: Any = ()) -> dict[str, Tensor]:
        noise = digits.tree(torch.randn((1, digits.problem.dimension), generator=generator))
        return {name: mean[name] + sd_diag[name] * noise[name] for name in noise}

    diag.diag_normal_sample = sample
    try:
        yield
    finally:
        diag.diag_normal_sample = original


def shared_noise(
    digits: Digits, method: str, temperature: float, draws: Draws, settings: Settings, seed: int
) -> dict[str, Fit]:
    """bayesflow's fit, and posteriors' from the same draws AND bayesflow's noise."""
    ours = fit_bayesflow(digits, method, temperature, draws, settings)[temperature]
    generator = clone(draws.generator)
    if method == "vi_diag":
        feed = vi_noise(digits, generator)
    else:
        start = draws.starts if method == "sghmc_parallel" else draws.starts[0]
        engine(digits, method, temperature, settings).init(start, generator)  # the momenta
        feed = sghmc_noise(digits, generator, draws.starts.shape[0])
    with feed:
        theirs = fit_posteriors(digits, method, temperature, draws, settings, seed)[temperature]
    return {"bayesflow": ours, "posteriors": theirs}


def parameters(fit: Fit) -> Tensor:
    """The fitted parameters that define the posterior (samples, or mean and variance)."""
    posterior = fit.posterior
    if posterior.samples is not None:
        return posterior.samples
    assert posterior.mean is not None and posterior.var is not None
    return torch.cat([posterior.mean, posterior.var.sqrt()])


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the shared-noise fits, print the table, write the JSON."""
    from benchmarks.parity.report import clean, commit, machine, versions
    from benchmarks.parity.run import evaluate

    parser = argparse.ArgumentParser(prog="python -m benchmarks.parity.noise")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--methods", nargs="+", choices=STOCHASTIC, default=list(STOCHASTIC))
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.1, 1.0])
    parser.add_argument("--out", type=Path, default=RESULTS / "parity-noise")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_start = list(os.getloadavg())
    settings = Settings(epochs=args.epochs, temperatures=tuple(args.temperatures))
    digits, rows = load(), []
    for seed in args.seeds:
        single = draw(digits, seed, 1, serial_schedule(settings, digits.num_data)[0])
        chains = draw(digits, seed, settings.chains, settings.epochs)
        for method in args.methods:
            for temperature in settings.temperatures:
                draws = chains if method == "sghmc_parallel" else single
                fits = shared_noise(digits, method, temperature, draws, settings, seed)
                difference = parameters(fits["bayesflow"]) - parameters(fits["posteriors"])
                row = {
                    "seed": seed,
                    "method": method,
                    "temperature": temperature,
                    "max_abs_parameter_difference": float(difference.abs().max()),
                }
                for tool, fit in fits.items():
                    row[tool] = evaluate(digits, fit.posterior, seed)
                rows.append(row)
                print(line(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{time.strftime('%Y-%m-%d')}-e{args.epochs}.json"
    arguments = argv if argv is not None else sys.argv[1:]
    document = {
        "benchmark": "parity_noise",
        "command": " ".join(["python -m benchmarks.parity.noise", *arguments]),
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "machine": machine(load_start, 1),
        "versions": versions(),
        "settings": {**asdict(settings), "seeds": args.seeds, "methods": args.methods},
        "rows": rows,
    }
    path.write_text(json.dumps(clean(document), indent=1, allow_nan=False) + "\n")
    print(f"wrote {path}")
    return rows


def line(row: dict[str, Any]) -> str:
    """One markdown row: seed, method, T, both tools' NLL and accuracy, the largest
    parameter difference."""
    ours, theirs = row["bayesflow"], row["posteriors"]
    return (
        f"| {row['seed']} | {row['method']} | {row['temperature']:g} "
        f"| {ours['test_nll']:.4f} | {theirs['test_nll']:.4f} "
        f"| {100 * ours['test_accuracy']:.2f} | {100 * theirs['test_accuracy']:.2f} "
        f"| {row['max_abs_parameter_difference']:.2g} |"
    )


if __name__ == "__main__":
    main()
