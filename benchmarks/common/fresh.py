"""One contender in a fresh Python process, so that its peak memory is its own.

A case that measures peak memory (``ru_maxrss`` on a CPU, ``torch.cuda.max_memory_allocated``
on a GPU) runs each contender as ``python -m MODULE ...`` from the repository's root, with
the run's torch thread count, and reads the JSON object the child prints on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from benchmarks import ROOT
from benchmarks.common.timing import Settings

__all__ = ["fresh_process"]


def fresh_process(arguments: list[str], settings: Settings, what: str) -> dict[str, Any]:
    """``python -m *arguments`` in a fresh process with ``settings.threads`` threads; the
    JSON object of its last line of output.

    Raises:
        RuntimeError: the child failed; the message names ``what`` and ends its stderr.
    """
    environment = {**os.environ, "OMP_NUM_THREADS": str(settings.threads),
                   "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", *arguments], cwd=ROOT, env=environment,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
