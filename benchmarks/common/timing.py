"""The clock of every case: ``time.perf_counter`` around blocks of calls, after warm-up.

Contenders are timed interleaved (A, B, A, B, ... with the order rotated each repeat) so
that a change in the machine's load during a case hits both libraries alike, which
matters on a shared 2-core machine. Each repeat times ``count`` calls in one block and
divides; the reported figure is the median over repeats, with the quartiles and the
extremes as its spread. A ratio of two contenders is the median of the per-repeat ratios
(:func:`paired_ratio`): repeat r of A and of B ran back to back, so each pair saw about
the same load. Every clock stops after ``torch.cuda.synchronize`` on a GPU, and every
contender is warmed up first (:func:`compare`, :func:`repeat`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

# torch's intra-op threads before any benchmark sets them: what `bayesflow run` uses on
# this machine (one per core). Cases that measure the machine's wall (Table 3) use it.
MACHINE_THREADS = torch.get_num_threads()

__all__ = [
    "Settings",
    "Timing",
    "compare",
    "elapsed",
    "load_average",
    "paired_ratio",
    "repeat",
    "synchronise",
    "time_once",
]

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

    @property
    def spread(self) -> float:
        """Half the interquartile range over the median (0.05: the middle half of the
        repeats lies within about ±5% of the median)."""
        return _relative_spread(self.samples)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: median, quartiles, min and max seconds per call, and the repeats."""
        low, high = _quartiles(self.samples)
        return {
            "median_s": self.median,
            "q1_s": low,
            "q3_s": high,
            "min_s": min(self.samples),
            "max_s": max(self.samples),
            "spread": self.spread,
            "repeats": len(self.samples),
        }


def _quartiles(samples: Sequence[float]) -> tuple[float, float]:
    if len(samples) < 2:
        return samples[0], samples[0]
    low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
    return low, high


def _relative_spread(samples: Sequence[float]) -> float:
    low, high = _quartiles(samples)
    return (high - low) / 2 / statistics.median(samples)


def paired_ratio(numerator: Timing, denominator: Timing) -> dict[str, float]:
    """``numerator / denominator`` repeat by repeat: the median ratio and its spread.

    Repeats of interleaved contenders ran back to back (:func:`compare`), so a load
    change between repeats cancels in each pair's ratio.
    """
    ratios = [a / b for a, b in zip(numerator.samples, denominator.samples)]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "spread": _relative_spread(ratios),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (other jobs on the machine's cores)."""
    return list(os.getloadavg())


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


def repeat(
    call: Callable[[], Any], settings: Settings, *, repeats: int = 3, warmup: int = 1
) -> Timing:
    """Seconds of a unit too long to run in blocks (a whole fit, a workflow), after
    ``warmup`` untimed calls, over ``repeats`` calls (one each in ``smoke`` mode)."""
    if settings.smoke:
        repeats, warmup = 1, min(warmup, 1)
    for _ in range(warmup):
        time_once(call, settings.device)
    return Timing([time_once(call, settings.device) for _ in range(repeats)])


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
