"""A stage's inputs and outputs as values that travel, for executors on other machines.

A stage function reads its input entries' files and writes its outputs into a staging
folder. On one machine those folders are the cache's own; on a Ray cluster the node that
computes a stage shares no folder with the driver. So the Ray executor
(:mod:`bayesflow.dag.cluster`) sends each input entry as a :class:`PackedEntry` (its key,
its small values and its files' bytes), and :func:`run_packed` computes the stage on the
node in a private scratch folder: it writes the inputs there, runs the stage into a fresh
staging folder there, and returns a :class:`PackedResult` (the values, the files' bytes,
where it ran). The driver alone writes the result into its own staging folder
(:func:`unpack_files`) and commits it to the cache; nothing the node reads or writes is
a path on the driver's machine.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import MANIFEST, OUTPUTS, Entry
from bayesflow.dag.plan import Stage

__all__ = ["PackedEntry", "PackedResult", "pack_entry", "pack_folder", "run_packed", "unpack_files"]

# The cache's own records in an entry folder: the driver writes them again on commit.
_CACHE_RECORDS = frozenset({MANIFEST, OUTPUTS})


@dataclass(frozen=True)
class PackedEntry:
    """A finished stage's output as a value: its key, its small values, its files.

    Attributes:
        key: the stage key.
        values: the small (JSON) values.
        files: each file's path relative to the entry folder (POSIX) and its bytes.
    """

    key: str
    values: dict[str, Any]
    files: dict[str, bytes] = field(repr=False)

    @property
    def size(self) -> int:
        """Bytes of its files."""
        return sum(len(data) for data in self.files.values())


@dataclass(frozen=True)
class PackedResult:
    """What a stage computed elsewhere sends back.

    Attributes:
        values: the stage's small values.
        files: its output files, relative path → bytes.
        placement: where it ran: ``host`` and ``pid``; in Ray also ``node`` (the node
            id), ``ip`` and ``resources`` (what the task held, e.g. ``{"CPU": 1.0}``).
    """

    values: dict[str, Any]
    files: dict[str, bytes] = field(repr=False)
    placement: dict[str, Any] = field(default_factory=dict)


def pack_folder(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (but the cache's ``outputs.json`` and ``manifest.json``)
    as relative POSIX path → bytes."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() not in _CACHE_RECORDS
    }


def pack_entry(entry: Entry) -> PackedEntry:
    """A cache entry as a value that can travel to another machine."""
    return PackedEntry(entry.key, dict(entry.values), pack_folder(entry.folder))


def unpack_files(files: dict[str, bytes], folder: Path) -> None:
    """Write ``files`` (relative path → bytes) under ``folder``.

    Raises:
        ValueError: a path that would leave ``folder`` (absolute, or with ``..``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"a packed file may not leave its folder: {name!r}")
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _placement() -> dict[str, Any]:
    """Where this process runs: host name, IP, pid, and the Ray node id inside Ray."""
    where: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            where["node"] = context.get_node_id()
            where["ip"] = ray.util.get_node_ip_address()
            where["resources"] = dict(context.get_assigned_resources())
    except ImportError:  # pragma: no cover - only called inside Ray tasks
        pass
    return where


def run_packed(
    run_stage: Callable[[Stage, dict[str, Entry], Path], dict[str, Any]],
    stage: Stage,
    inputs: dict[str, PackedEntry],
) -> PackedResult:
    """Compute ``stage`` from packed inputs in a private scratch folder of this machine and
    return its values and files; the scratch folder is removed whatever happens."""
    with tempfile.TemporaryDirectory(prefix="bayesflow-stage-") as scratch:
        root = Path(scratch)
        entries = {}
        for index, (name, packed) in enumerate(inputs.items()):
            folder = root / f"input-{index}"
            unpack_files(packed.files, folder)
            entries[name] = Entry(packed.key, folder, packed.values)
        staging = root / "output"
        staging.mkdir()
        values = run_stage(stage, entries, staging)
        return PackedResult(values, pack_folder(staging), _placement())
