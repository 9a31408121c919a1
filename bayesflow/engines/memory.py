"""How much memory a computation may take, and how big its chunks can be within it.

Passes that push many parameter vectors or many examples through a network at once (the
linearised predictive, the curvature of Laplace and the EKF) split their work into chunks.
The size of a chunk comes from a memory budget:

- ``BAYESFLOW_MEMORY_LIMIT`` when it is set: a size such as ``2GiB``, ``512MiB``, ``1.5GB``
  or a number of bytes, used as it is (it overrides what the device reports);
- otherwise :data:`SAFETY_FRACTION` of the memory free on the device: on a CUDA device what
  ``torch.cuda.mem_get_info`` reports, on the CPU the available RAM (psutil when it is
  installed, else ``MemAvailable`` in ``/proc/meminfo``).

What one row of a chunk costs is estimated by running the network's forward pass on a few
rows and adding up the bytes of every tensor it creates (:func:`forward_bytes`): an upper
bound on what a forward pass holds at once, which the callers scale by what their
transform (a Jacobian-vector or vector-Jacobian product) adds.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor

from bayesflow.errors import StageError

__all__ = [
    "MEMORY_VARIABLE", "SAFETY_FRACTION", "RowCost", "available_bytes", "format_bytes",
    "forward_bytes", "memory_budget", "parse_size", "row_cost", "rows_within",
]

MEMORY_VARIABLE = "BAYESFLOW_MEMORY_LIMIT"
# The share of the free memory a chunk may take: the estimate of a chunk's cost is rough,
# the allocator fragments, and other tensors of the stage (the data, the outputs) live too.
SAFETY_FRACTION = 0.5
# When the free memory cannot be read (neither psutil nor /proc/meminfo): assume this much.
FALLBACK_BYTES = 4 * 2**30

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes in a size such as ``2GiB``, ``512 MiB``, ``1.5GB``, ``64k`` or ``1000000``.

    Decimal units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB, GiB, TiB)
    powers of 1024; the case of the unit does not matter.

    Raises:
        ValueError: the text is not a positive size.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (write e.g. 2GiB, 512MiB, 1.5GB or a number of bytes)")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return size


def format_bytes(size: float) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``512 B``: a size for a message."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def _cpu_available() -> int:
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_BYTES


def available_bytes(device: torch.device) -> int:
    """The memory free on ``device`` now: CUDA's free memory, or the CPU's available RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return _cpu_available()


def memory_budget(device: torch.device) -> int:
    """Bytes one chunked pass may take on ``device``: ``BAYESFLOW_MEMORY_LIMIT`` if set,
    else :data:`SAFETY_FRACTION` of :func:`available_bytes`.

    Raises:
        StageError: ``BAYESFLOW_MEMORY_LIMIT`` is set but is not a size.
    """
    value = os.environ.get(MEMORY_VARIABLE, "").strip()
    if value:
        try:
            return parse_size(value)
        except ValueError as error:
            raise StageError(f"{MEMORY_VARIABLE}: {error}; or unset it to use half the free memory") from None
    return int(SAFETY_FRACTION * available_bytes(device))


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(item) for item in value)
    return 0


def _counting_mode() -> Any:
    """A dispatch mode that adds up the bytes of the tensors every operation creates
    (views share their base's memory and are not counted)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if not getattr(func, "is_view", False):
                self.total += _tensor_bytes(result)
            return result

    return Counting()


def forward_bytes(forward: Callable[[Tensor], Tensor], inputs: Tensor) -> int:
    """Bytes of every tensor ``forward(inputs)`` creates, without gradients: an upper bound
    on the memory the forward pass holds at its peak."""
    mode = _counting_mode()
    with torch.no_grad(), mode:
        forward(inputs)
    return int(mode.total)


class RowCost:
    """What a forward pass costs per row of its inputs, and what it costs whatever the rows.

    Measured by :func:`forward_bytes` on one and on three rows of ``inputs``: the
    difference is what each row adds; what is left (weights reshaped or transposed from
    the flat parameters) is the fixed part.

    Attributes:
        per_row: bytes each row adds.
        fixed: bytes that do not depend on the number of rows.
    """

    def __init__(self, forward: Callable[[Tensor], Tensor], inputs: Tensor) -> None:
        one = forward_bytes(forward, inputs[:1])
        if inputs.shape[0] >= 3:
            three = forward_bytes(forward, inputs[:3])
            self.per_row = max((three - one) // 2, 1)
        else:
            self.per_row = max(one, 1)
        self.fixed = max(one - self.per_row, 0)


# Measured costs by network (weakly: they go with it) and by the shape of one row, so that
# a pass repeated every step (the extended Kalman filter's curvature) measures once.
_COSTS: weakref.WeakKeyDictionary[Any, dict[Hashable, RowCost]] = weakref.WeakKeyDictionary()


def row_cost(network: Any, forward: Callable[[Tensor], Tensor], inputs: Tensor) -> RowCost:
    """:class:`RowCost` of ``forward`` on ``inputs``, measured once per ``network`` (any
    object that can be weakly referenced, such as the problem's forward function) and
    shape, dtype and device of a row."""
    shape = (tuple(inputs.shape[1:]), inputs.dtype, inputs.device)
    try:
        known = _COSTS.setdefault(network, {})
    except TypeError:  # not weakly referenceable: measure every time
        return RowCost(forward, inputs)
    if shape not in known:
        known[shape] = RowCost(forward, inputs)
    return known[shape]


def rows_within(budget: int, fixed: int, per_row: int, total: int, what: str) -> int:
    """How many rows (at most ``total``, at least 1) fit ``fixed + rows × per_row ≤ budget``.

    Args:
        budget: the bytes allowed (:func:`memory_budget`).
        fixed: bytes the pass needs whatever the number of rows.
        per_row: bytes each row adds.
        total: the rows there are.
        what: the pass, for the message (e.g. ``"the linearised predictive"``).

    Raises:
        StageError: not even one row fits; the message names ``BAYESFLOW_MEMORY_LIMIT``.
    """
    rows = (budget - fixed) // max(per_row, 1)
    if rows < 1:
        raise StageError(
            f"{what} needs about {format_bytes(fixed + per_row)} for a single row, but its memory "
            f"budget is {format_bytes(budget)} ({_budget_source()}); raise {MEMORY_VARIABLE} "
            "(e.g. 8GiB), free memory on the device, or use a smaller model or fewer samples"
        )
    return int(min(rows, max(total, 1)))


def _budget_source() -> str:
    value = os.environ.get(MEMORY_VARIABLE, "").strip()
    if value:
        return f"{MEMORY_VARIABLE}={value}"
    return f"{SAFETY_FRACTION:.0%} of the memory free on the device; {MEMORY_VARIABLE} unset"
