"""Where and when a benchmark ran: machine, library versions, commit, and the results file."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["machine", "revision", "stamp", "write_json"]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's answer)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def revision() -> str:
    """The bayesflow commit measured, noting uncommitted changes to the package."""
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    try:
        dirty = git("status", "--porcelain", "bayesflow")
        return git("rev-parse", "--short", "HEAD") + (
            " + uncommitted changes in bayesflow/" if dirty else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(device: str, threads: int) -> dict[str, Any]:
    """Where and with what the benchmark ran."""
    from benchmarks.peers import posteriors_version

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "posteriors": posteriors_version(),
        "device": device,
        "threads": threads,
        "bayesflow_revision": revision(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info


def write_json(results: dict[str, Any], folder: Path) -> Path:
    """``<folder>/<date>-<device>[-mode].json``."""
    folder.mkdir(parents=True, exist_ok=True)
    mode = results["settings"]["mode"]
    suffix = "" if mode == "full" else f"-{mode}"
    path = folder / f"{results['date']}-{results['machine']['device']}{suffix}.json"
    path.write_text(json.dumps(results, indent=1, default=float) + "\n")
    return path


def stamp() -> tuple[str, str]:
    """Today's date and the time, for file names and the doc."""
    now = time.localtime()
    return time.strftime("%Y-%m-%d", now), time.strftime("%H:%M %Z", now)
