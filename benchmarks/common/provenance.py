"""Where and when a benchmark ran: machine, library versions, commit, and the results file.

Every results file records the bayesflow commit (:func:`revision`, with the uncommitted
files under ``bayesflow/`` listed), the machine (CPU model, cores, load average; the GPU
when there is one), the device and thread count, and the versions of Python and of the
libraries measured or used (:data:`LIBRARIES`).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["LIBRARIES", "machine", "revision", "stamp", "uncommitted", "versions", "write_json"]

# Distributions whose versions every results file records.
LIBRARIES = ("torch", "torchopt", "posteriors", "mlflow", "numpy")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's answer)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    import subprocess

    from benchmarks import ROOT

    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def revision() -> str:
    """The bayesflow commit measured, noting uncommitted changes to the package."""
    import subprocess

    try:
        return _git("rev-parse", "--short", "HEAD") + (
            " + uncommitted changes in bayesflow/" if uncommitted() else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uncommitted() -> list[str]:
    """The files under ``bayesflow/`` that differ from the commit (``git status``)."""
    import subprocess

    try:
        lines = _git("status", "--porcelain", "bayesflow").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return []
    # "XY path" (the status columns, then the path); the first line's leading blank was
    # stripped with the output, so split on whitespace rather than cut three characters.
    return [line.split(maxsplit=1)[1] for line in lines if line.strip()]


def versions() -> dict[str, str]:
    """Python's version and each of :data:`LIBRARIES`' (from the installed metadata, so
    nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def machine(device: str, threads: int) -> dict[str, Any]:
    """Where and with what the benchmark ran."""
    from benchmarks.common.peers import posteriors_version

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
        "bayesflow_uncommitted": uncommitted(),
        "versions": versions(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
        info["versions"]["cuda"] = str(torch.version.cuda)
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
