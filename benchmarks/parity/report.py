"""Where a parity run ran and what it found: provenance, the results JSON, the doc block."""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

import torch

from benchmarks import ROOT
from benchmarks.parity.stats import number, table

__all__ = [
    "END",
    "START",
    "clean",
    "commit",
    "machine",
    "render",
    "replace_block",
    "versions",
    "write",
]

START = "<!-- parity results: start (written by python -m benchmarks.parity.run) -->"
END = "<!-- parity results: end -->"


def commit() -> dict[str, Any]:
    """The commit measured and the files of bayesflow/ and the benchmark changed since."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.rstrip()

    try:
        changed = git("status", "--porcelain", "bayesflow", "benchmarks/parity*.py")
        return {
            "head": git("rev-parse", "HEAD").strip(),
            "uncommitted": [line[3:] for line in changed.splitlines()],
        }
    except (OSError, subprocess.CalledProcessError):
        return {"head": "unknown", "uncommitted": []}


def machine(load_start: list[float], threads: int) -> dict[str, Any]:
    """The CPU, cores and load average (at start and end) the run shared."""
    from benchmarks.common.provenance import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
        "threads": threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def versions() -> dict[str, str]:
    """torch, posteriors, bayesflow and the libraries both rest on."""
    from importlib.metadata import version

    import bayesflow

    return {
        "torch": torch.__version__,
        "posteriors": version("posteriors"),
        "bayesflow": bayesflow.__version__,
        "torchopt": version("torchopt"),
        "tensordict": version("tensordict"),
    }


def write(results: dict[str, Any], folder: Path) -> Path:
    """``<folder>/<date>[-quick|-full].json``."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = "" if results["mode"] == "default" else f"-{results['mode']}"
    path = folder / f"{results['date']}{suffix}.json"
    path.write_text(json.dumps(clean(results), indent=1, allow_nan=False) + "\n")
    return path


def clean(value: Any) -> Any:
    """``value`` with NaN and infinite floats as None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(item) for item in value]
    return value


def render(results: dict[str, Any], path: Path) -> str:
    """The doc's results block: provenance, settings, the table, the example's Laplace."""
    try:
        shown = path.resolve().relative_to(ROOT)
    except ValueError:
        shown = path
    lines = [
        (
            f"Run {results['date']} ({results['time']}), mode `{results['mode']}`: "
            f"`{results['command']}`, {results['runtime_seconds'] / 60:.1f} minutes; "
            f"results in `{shown}`."
        ),
        "",
        *provenance(results),
        "",
        (
            "Mean ± standard error over seeds; gap = bayesflow − posteriors, paired by seed, "
            "± its standard error, with the paired t test's p value; target |gap| ≤ 0.03 NLL "
            "and ≤ 1.5 accuracy points."
        ),
        "",
        table(results["cells"]),
    ]
    lines += [
        "",
        (
            "Wall seconds per fit (mean over seeds; a shared machine, so not a speed "
            "benchmark: docs/benchmarks.md times the steps):"
        ),
        "",
        *seconds_table(results["cells"]),
    ]
    if results["variants"]:
        lines += [
            "",
            (
                "posteriors' Laplace as its IMDB example configures it (no prior in the "
                "precision, sd = √(T / (Σ GGN + 10⁻³))), from the same fits:"
            ),
            "",
            "| T | test NLL | accuracy % |",
            "| --- | --- | --- |",
        ]
        for variant in results["variants"]:
            summary = variant["summary"]
            lines.append(
                f"| {variant['temperature']:g} | {number(summary['test_nll'], 1.0, 3)} "
                f"| {number(summary['test_accuracy'], 100.0, 1)} |"
            )
    return "\n".join(lines)


def seconds_table(cells: list[dict[str, Any]]) -> list[str]:
    """Each tool's mean wall seconds per fit, per method and temperature."""
    rows = ["| method | T | bayesflow s | posteriors s |", "| --- | --- | --- | --- |"]
    for cell in cells:
        summary = cell["summary"]
        temperature = "any" if cell["temperature"] is None else f"{cell['temperature']:g}"
        rows.append(
            f"| {cell['method']} | {temperature} | {summary['bayesflow']['seconds']['mean']:.1f} "
            f"| {summary['posteriors']['seconds']['mean']:.1f} |"
        )
    return rows


def provenance(results: dict[str, Any]) -> list[str]:
    """The bullet lines of machine, versions, settings and checks."""
    settings, host, versions = results["settings"], results["machine"], results["versions"]
    serial, checks = settings["serial_sghmc"], results["checks"]
    changed = results["commit"]["uncommitted"]
    dirty = f" + uncommitted changes to {', '.join(changed)}" if changed else ""
    start = ", ".join(f"{value:.2f}" for value in host["load_average_start"])
    end = ", ".join(f"{value:.2f}" for value in host["load_average_end"])
    seeds = settings["seeds"]
    map_difference = max(checks["map_max_abs_difference"], default=math.nan)
    return [
        (
            f"- Machine: {host['cpu']}, {host['cores']} cores, {host['threads']} torch "
            f"thread(s); load average (1, 5, 15 min) {start} at start, {end} at end."
        ),
        (
            f"- torch {versions['torch']}, posteriors {versions['posteriors']}, bayesflow "
            f"{versions['bayesflow']} at {results['commit']['head'][:7]}{dirty}."
        ),
        (
            f"- Seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}); {settings['epochs']} epochs "
            f"(serial SGHMC {serial['epochs']}, burn-in {serial['burn_in']} steps, then one step in "
            f"{serial['thin']} kept); batch {settings['batch_size']}; {settings['chains']} "
            f"parallel chains (posteriors: {settings['peer_chains']}); "
            f"{settings['evaluation_samples']} samples per predictive."
        ),
        (
            f"- Checks: the two log posteriors' gradients agree to "
            f"{checks['gradient_max_abs_difference']:.1g}; the two MAPs differ by at most "
            f"{map_difference:.1g} in any parameter; docs/design.md's plain-torch recipe "
            f"rebuilds the starts: {checks['plain_torch_starts_equal']}."
        ),
    ]


def replace_block(doc: Path, block: str) -> None:
    """Replace the text between the doc's two markers (or append them) with ``block``."""
    text = doc.read_text() if doc.exists() else ""
    if START in text and END in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
    else:
        before, after = text + ("\n" if text else ""), "\n"
    doc.write_text(f"{before}{START}\n\n{block}\n\n{END}{after}")
