"""What a stage pays to run as a Ray task: overhead per task, and time per MB of artefact.

    python -m benchmarks.studies.ray_transfer                      # a local Ray with 2 CPUs
    python -m benchmarks.studies.ray_transfer --address HOST:PORT  # a running cluster

Both go through :class:`bayesflow.dag.cluster.RayExecutor` exactly as a run does (the
input entry packed and put into the object store, the task computing in a scratch folder
of its node, the files sent back and written into the driver's staging folder):

- **overhead per task**: a trivial stage (one 8-byte file) submitted and awaited one at a
  time, through Ray and inline in this process; the median difference is what Ray adds;
- **time per MB moved**: a stage that copies an input file of S MB to its output, so S MB
  travel to the node and S MB back; the median time beyond the trivial stage's, divided
  by 2 S, is the time per MB of artefact moved.

Medians of ``--repeats`` timings each; nothing here is asserted (docs/distributed.md
quotes the figures with the commit and machine that gave them).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.executors import InlineExecutor
from bayesflow.dag.plan import Stage

__all__ = ["Echo", "main"]


class Echo:
    """A stage that copies its input's ``data.bin`` to its output (or writes 8 bytes)."""

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        data = b"".join(entry.file("data.bin").read_bytes() for entry in inputs.values()) or b"12345678"
        (staging / "data.bin").write_bytes(data)
        return {"size": len(data)}


def _timed(executor: Any, cache: Cache, stage: Stage, inputs: dict[str, Entry], repeats: int) -> float:
    """The median seconds of submitting ``stage`` and waiting for it, ``repeats`` times."""
    seconds = []
    for _ in range(repeats):
        staging = cache.staging(stage.key)
        began = time.perf_counter()
        executor.submit(stage, inputs, staging).result()
        seconds.append(time.perf_counter() - began)
        cache.discard(staging)
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure and print; return the figures (seconds, seconds per MB)."""
    from bayesflow.dag.cluster import RayExecutor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running Ray cluster (default: a local Ray)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--megabytes", type=int, default=32, help="the artefact size S")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        cache = Cache(folder)
        staging = cache.staging("input")
        (staging / "data.bin").write_bytes(bytes(arguments.megabytes * 2**20))
        big = {"fit/input": cache.commit("input", staging, {})}
        trivial, copy = Stage("fit/trivial", "fit", (), "t"), Stage("fit/copy", "fit", ("fit/input",), "c")
        inline = _timed(InlineExecutor(Echo()), cache, trivial, {}, arguments.repeats)
        ray = RayExecutor(Echo(), address=arguments.address, workers=2)
        try:
            _timed(ray, cache, trivial, {}, 3)  # workers started
            remote = _timed(ray, cache, trivial, {}, arguments.repeats)
            moved = _timed(ray, cache, copy, big, max(3, arguments.repeats // 5))
        finally:
            ray.shutdown()
    per_megabyte = (moved - remote) / (2 * arguments.megabytes * 2**20 / 1e6)
    figures = {"inline_s": inline, "ray_s": remote, "overhead_s": remote - inline,
               "copy_s": moved, "seconds_per_mb": per_megabyte}
    print(f"trivial stage inline:  {inline * 1e3:8.2f} ms")
    print(f"trivial stage via Ray: {remote * 1e3:8.2f} ms  (overhead {1e3 * (remote - inline):.2f} ms a task)")
    print(f"{arguments.megabytes} MB in and back:   {moved * 1e3:8.2f} ms  "
          f"({per_megabyte * 1e3:.2f} ms per MB moved)")
    return figures


if __name__ == "__main__":
    main()
