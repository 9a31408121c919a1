"""Run the benchmark: ``python -m benchmarks.speed.run [--device cpu|cuda] [--quick] [--out DIR]``.

Every case runs in this one process, bayesflow and posteriors side by side on the same
model, data, hyper-parameters and batches (see :mod:`benchmarks`). Results go to
``<out>/<date>-<device>.json`` and, between markers, into ``docs/benchmarks.md``.

    python -m benchmarks.speed.run                    # the full benchmark (about 15 minutes)

A case that fails (a workflow whose API is being changed, say) is recorded under
``failed`` in the JSON and named in the doc; the other cases' results are kept. In
``--smoke`` mode (the tests) a failure is raised.
    python -m benchmarks.speed.run --quick            # fewer steps and a reduced workflow
    python -m benchmarks.speed.run --smoke --out /tmp/bench --doc /tmp/bench/benchmarks.md
    python -m benchmarks.speed.run --cases pima digits
    python -m benchmarks.speed.run --cases llm          # a language model's subsets (issue 23)
    python -m benchmarks.speed.run --cases llm8b --device cuda   # Llama 3 8B's shape, a GPU only
    python -m benchmarks.speed.run --cases trunk        # the shared trunk on SmolLM2's shape (issue 31)
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks import RESULTS, ROOT
from benchmarks.common.timing import Settings

__all__ = ["CASES", "main", "run"]



def _pima(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed import pima

    return pima.run(settings)


def _digits(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed import digits

    return digits.run(settings)


def _grids(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed import grids

    return grids.run(settings)


def _workflow(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed import workflow

    return workflow.run(settings)


def _kfac(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed.kfac import case

    return case.run(settings)


def _llm(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed.llm import case

    return case.run(settings)


def _llm8b(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed.llm import case

    return case.run_8b(settings)


def _trunk(settings: Settings) -> dict[str, Any]:
    from benchmarks.speed.trunk import case

    return case.run(settings)


CASES: dict[str, Callable[[Settings], dict[str, Any]]] = {
    "pima": _pima,
    "digits": _digits,
    "grids": _grids,
    "workflow": _workflow,
    "kfac": _kfac,
    "llm": _llm,
}
# Cases a run makes only when named (--cases): on a GPU only; on any device, too long for
# `make bench` (trunk: 38 minutes on the 2-core CPU, 14 with --quick at load 5).
GPU_CASES: dict[str, Callable[[Settings], dict[str, Any]]] = {"llm8b": _llm8b}
NAMED_CASES: dict[str, Callable[[Settings], dict[str, Any]]] = {"trunk": _trunk}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed.run", description="bayesflow against posteriors, side by side."
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument(
        "--quick",
        action="store_true",
        help="fewer steps, the paper's case extrapolated, a reduced workflow",
    )
    speed.add_argument(
        "--smoke",
        action="store_true",
        help="a handful of steps per case, K ≤ 10, a one-epoch workflow (tests)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for both libraries (default 1)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "speed",
        help="folder of the JSON results",
    )
    parser.add_argument(
        "--doc",
        type=Path,
        default=None,
        help="Markdown file to put the tables in (default docs/benchmarks.md; "
        "none with --smoke unless given)",
    )
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=[*CASES, *GPU_CASES, *NAMED_CASES],
        default=list(CASES),
        help="cases to run (default: all but the GPU-only llm8b and the long trunk)",
    )
    return parser.parse_args(argv)


def run(settings: Settings, cases: Sequence[str], command: str) -> dict[str, Any]:
    """Run ``cases``; the results with the machine, the targets and the timings."""

    if settings.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    gpu_only = [name for name in cases if name in GPU_CASES]
    if gpu_only and settings.device != "cuda":
        raise SystemExit(
            f"--cases {' '.join(gpu_only)}: Llama 3 8B's shape (16 GB of bfloat16 weights, "
            "10 chains of its last layer) runs on one GPU only; add --device cuda"
        )
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        return _run(settings, cases, command)
    finally:
        torch.set_num_threads(previous_threads)


def _run(settings: Settings, cases: Sequence[str], command: str) -> dict[str, Any]:
    from benchmarks.common.provenance import machine, stamp
    from benchmarks.speed.report import targets

    date, clock = stamp()
    results: dict[str, Any] = {
        "date": date,
        "time": clock,
        "command": command,
        "machine": machine(settings.device, settings.threads),
        "settings": {
            "mode": settings.mode,
            "warmup": settings.warmup,
            "repeats": settings.repeats,
            "count": settings.count,
        },
    }
    began = time.perf_counter()
    for name in cases:
        case_began = time.perf_counter()
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        try:
            results[name] = {**CASES, **GPU_CASES, **NAMED_CASES}[name](settings)
        except Exception as exc:  # one case failing leaves the others' results
            if settings.smoke:
                raise
            traceback.print_exc()
            first_line = (str(exc).splitlines() or [""])[0]
            results.setdefault("failed", {})[name] = f"{type(exc).__name__}: {first_line}"
        torch.set_num_threads(settings.threads)
        print(
            f"[benchmarks] {name} done in {time.perf_counter() - case_began:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    results["seconds"] = time.perf_counter() - began
    results["load_average_end"] = list(os.getloadavg())
    results["targets"] = targets(results)
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse, run, write the JSON and the doc; return the results."""
    from benchmarks.common.provenance import write_json
    from benchmarks.speed.report import markdown, write_doc

    args = parse(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    settings = Settings.for_mode(mode, args.device, args.threads)
    command = "python -m benchmarks.speed.run " + shlex.join(
        list(argv if argv is not None else sys.argv[1:])
    )
    results = run(settings, args.cases, command.strip())
    path = write_json(results, args.out)
    print(f"[benchmarks] results: {path}", file=sys.stderr)
    doc = (
        args.doc
        if args.doc is not None
        else (None if args.smoke else ROOT / "docs" / "benchmarks.md")
    )
    if doc is not None:
        write_doc(results, doc)
        print(f"[benchmarks] table: {doc}", file=sys.stderr)
    else:
        print(markdown(results))
    return results


if __name__ == "__main__":
    main()
