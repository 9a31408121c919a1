"""The clock of every case: ``time.perf_counter`` around blocks of calls, after warm-up.

Contenders are timed interleaved (A, B, A, B, ... with the order rotated each repeat) so
that a change in the machine's load during a case hits both libraries alike, which
matters on a shared 2-core machine. Each repeat times ``count`` calls in one block and
divides; the reported figure is the median over repeats.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Settings", "Timing", "compare", "elapsed", "synchronise", "time_once"]

# A timed block lasts about this long (calls per block are calibrated from one call), so
# a slow contender (a Python loop over 100 chains) is not run 50 times per block.
BLOCK_SECONDS = {"full": 0.3, "quick": 0.15, "smoke": 0.0}
WARMUP_SECONDS = {"full": 1.0, "quick": 0.3, "smoke": 0.0}


@dataclass(frozen=True)
class Settings:
    """How hard a benchmark run tries.

    Attributes:
        mode: ``"full"``, ``"quick"`` or ``"smoke"`` (a handful of steps per case, for tests).
        device: ``"cpu"`` or ``"cuda"``.
        threads: torch intra-op threads for both libraries.
        warmup: calls before timing starts (compilation caches, allocator, branch predictors).
        repeats: timed blocks per contender; the median is reported.
        count: calls per timed block.
    """

    mode: str = "full"
    device: str = "cpu"
    threads: int = 1
    warmup: int = 20
    repeats: int = 7
    count: int = 50

    @classmethod
    def for_mode(cls, mode: str, device: str = "cpu", threads: int = 1) -> Settings:
        """The warm-up, repeats and block size of a mode."""
        if mode == "smoke":
            return cls(mode, device, threads, warmup=1, repeats=2, count=2)
        if mode == "quick":
            return cls(mode, device, threads, warmup=10, repeats=5, count=20)
        return cls(mode, device, threads)

    @property
    def smoke(self) -> bool:
        """Whether this is the tiny mode the test suite runs."""
        return self.mode == "smoke"


@dataclass
class Timing:
    """Seconds per call of one contender: the median and the spread over repeats."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.samples)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: median, min and max seconds per call, and the repeats."""
        return {
            "median_s": self.median,
            "min_s": min(self.samples),
            "max_s": max(self.samples),
            "repeats": len(self.samples),
        }


def synchronise(device: str) -> None:
    """Wait for queued GPU work, so a timer stops when the work is done, not queued."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def compare(
    contenders: dict[str, Callable[[], Any]],
    settings: Settings,
    *,
    count: int | None = None,
    warmup: int | None = None,
    repeats: int | None = None,
) -> dict[str, Timing]:
    """Seconds per call of each contender, timed interleaved.

    One untimed call first measures each contender; its warm-up is then ``warmup`` calls
    or about ``WARMUP_SECONDS`` (whichever is fewer, at least one) and its block ``count``
    calls or about ``BLOCK_SECONDS`` (whichever is fewer, at least one).

    Args:
        contenders: name → a call that does one unit of work (one step, one epoch) and
            carries its own state forward.
        settings: device, warm-up, repeats and block size (each overridable here).
        count, warmup, repeats: overrides of ``settings`` for expensive units.
    """
    count = settings.count if count is None else count
    warmup = settings.warmup if warmup is None else warmup
    repeats = settings.repeats if repeats is None else repeats
    names = list(contenders)
    counts: dict[str, int] = {}
    for name in names:
        one = time_once(contenders[name], settings.device)
        for _ in range(_within(warmup, WARMUP_SECONDS.get(settings.mode, 1.0), one) - 1):
            contenders[name]()
        counts[name] = _within(count, BLOCK_SECONDS.get(settings.mode, 0.3), one)
    synchronise(settings.device)
    timings = {name: Timing() for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            call, calls = contenders[name], counts[name]
            began = time.perf_counter()
            for _ in range(calls):
                call()
            synchronise(settings.device)
            timings[name].samples.append((time.perf_counter() - began) / calls)
    return timings


def _within(most: int, seconds: float, one: float) -> int:
    """``most`` calls, or as many as fit in ``seconds`` at ``one`` second each; at least 1."""
    if seconds <= 0:
        return max(1, most)
    return max(1, min(most, round(seconds / max(one, 1e-9))))


def time_once(call: Callable[[], Any], device: str) -> float:
    """Seconds of one call (for units too long to repeat, such as a whole workflow)."""
    synchronise(device)
    began = time.perf_counter()
    call()
    synchronise(device)
    return time.perf_counter() - began


@contextmanager
def elapsed(device: str, into: dict[str, float], key: str) -> Iterator[None]:
    """``with elapsed(device, times, "fit"):`` adds the block's seconds to ``times["fit"]``."""
    synchronise(device)
    began = time.perf_counter()
    try:
        yield
    finally:
        synchronise(device)
        into[key] = into.get(key, 0.0) + time.perf_counter() - began


def cycle(items: Sequence[Any]) -> Callable[[], Any]:
    """A call returning ``items[0], items[1], ...`` round and round (batches for a stepper)."""
    position = [0]

    def next_item() -> Any:
        item = items[position[0]]
        position[0] = (position[0] + 1) % len(items)
        return item

    return next_item
