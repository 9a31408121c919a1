"""A content-addressed store of finished stage outputs.

A stage's outputs live in ``<root>/<key>/``: files (``posterior.npz``) and
``outputs.json`` (small values: metrics, timings). A stage is written into a private
temporary folder and moved into place with one ``os.replace``, so a partial output is
never visible as finished, whatever kills the process. Side records (such as the MLflow
run that holds a stage) sit beside it as ``<key>.<name>.json``, also written atomically.

An index per workflow, ``<root>/index/<workflow>.json``, maps each stage name to the key
and config it last finished under, so a plan can say why a stage is stale: which part
of its config changed since.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Cache", "Entry", "write_json_atomic"]


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write ``payload`` as JSON to ``path`` so that readers see all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(payload, stream, indent=1, sort_keys=True, default=str)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Entry:
    """A finished stage's outputs: a folder and its small values."""

    key: str
    folder: Path
    values: dict[str, Any]

    def file(self, name: str) -> Path:
        """The path of one output file."""
        return self.folder / name


class Cache:
    """Finished stage outputs under ``root``, keyed by stage key."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _folder(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> Entry | None:
        """The finished entry of ``key``, or None."""
        folder = self._folder(key)
        outputs = folder / "outputs.json"
        if not outputs.exists():
            return None
        return Entry(key, folder, json.loads(outputs.read_text()))

    def staging(self, key: str) -> Path:
        """A fresh private folder to write ``key``'s outputs into before :meth:`commit`."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self.root, prefix=f".staging-{key}-"))

    def commit(self, key: str, staging: Path, values: dict[str, Any]) -> Entry:
        """Make ``staging`` the finished entry of ``key`` in one atomic rename."""
        write_json_atomic(staging / "outputs.json", values)
        target = self._folder(key)
        if target.exists():  # a forced rerun replaces the old entry
            trash = Path(tempfile.mkdtemp(dir=self.root, prefix=f".trash-{key}-"))
            os.replace(target, trash / key)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(staging, target)
        return Entry(key, target, values)

    def discard(self, staging: Path) -> None:
        """Remove an unfinished staging folder."""
        shutil.rmtree(staging, ignore_errors=True)

    def clean_staging(self) -> int:
        """Remove staging folders left by killed processes; return how many."""
        if not self.root.exists():
            return 0
        leftovers = [p for p in self.root.iterdir() if p.name.startswith((".staging-", ".trash-"))]
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        return len(leftovers)

    def record(self, key: str, name: str) -> dict[str, Any] | None:
        """A side record of ``key`` (e.g. its MLflow run), or None."""
        path = self.root / f"{key}.{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def write_record(self, key: str, name: str, payload: dict[str, Any]) -> None:
        """Write a side record of ``key`` atomically."""
        write_json_atomic(self.root / f"{key}.{name}.json", payload)

    def _index_path(self, workflow: str) -> Path:
        return self.root / "index" / f"{workflow}.json"

    def index(self, workflow: str) -> dict[str, dict[str, Any]]:
        """Stage name → ``{"key", "config"}`` it last finished under, for ``workflow``."""
        try:
            index = json.loads(self._index_path(workflow).read_text())
        except (OSError, ValueError):  # none yet, or unreadable: nothing is known
            return {}
        return index if isinstance(index, dict) else {}

    def write_index(self, workflow: str, index: dict[str, dict[str, Any]]) -> None:
        """Replace ``workflow``'s index atomically."""
        write_json_atomic(self._index_path(workflow), index)
