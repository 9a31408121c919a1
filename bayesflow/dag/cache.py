"""A content-addressed store of finished stage outputs.

A stage's outputs live in ``<root>/<key>/``: files (``posterior.npz``), ``outputs.json``
(small values: metrics, timings) and ``manifest.json`` (each file's size). A stage is
written into a private staging folder and moved into place with one ``os.replace``, so a
partial output is never visible as finished, whatever kills the process. Side records
(such as the MLflow run that holds a stage) sit beside it as ``<key>.<name>.json``, also
written atomically.

An entry that cannot be trusted all the same (an ``outputs.json`` cut short by a full
disk or a hand edit, a file missing or of the wrong size, an unreadable side record or
index) is treated as missing: the stage is recomputed and a :class:`CacheWarning` names
the path. A cache is never a reason for an internal error.

An index per workflow, ``<root>/index/<workflow>.json``, maps each stage name to the key
and config it last finished under, so a plan can say why a stage is stale: which part
of its config changed since.

Staging folders carry the pid and host of the process writing them
(``.staging-<pid>-<host>-<key>-<random>``), so that cleaning up after a killed process
never touches the folders of a live one. One run at a time writes to a cache: see
:meth:`Cache.lock` and :mod:`bayesflow.dag.lock`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from bayesflow.dag.lock import LOCK_NAME, FileLock, holding, wait_from_environment
from bayesflow.errors import StageError

__all__ = ["Cache", "CacheWarning", "Entry", "unwritable", "write_json_atomic"]

OUTPUTS = "outputs.json"
MANIFEST = "manifest.json"
LEFTOVER_PREFIXES = (".staging-", ".trash-")

P = ParamSpec("P")
R = TypeVar("R")


class CacheWarning(UserWarning):
    """A cache entry, side record or index could not be read and is treated as missing."""


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


def _read_mapping(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The JSON mapping in ``path`` and ``""``; ``(None, "")`` when there is no such file;
    ``(None, what is wrong)`` when it cannot be read, is not JSON or not a mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as error:  # a folder, unreadable, not UTF-8
        return None, f"cannot be read ({error})"
    try:
        value = json.loads(text)
    except ValueError:
        return None, "is not valid JSON (cut short?)"
    if not isinstance(value, dict):
        return None, f"holds {type(value).__name__}, not a mapping"
    return value, ""


# Errors of a write that more room would fix: no space left, or the user's quota used up.
FULL = (errno.ENOSPC, errno.EDQUOT)
# A disk with less room than this is full for a stage that could not write (a posterior
# of a small network is tens of kilobytes; the default workflow's are about 1 MB).
NEARLY_FULL = 16 * 2**20


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count / 1e3:.0f} kB"


def _footprint(root: Path) -> str:
    """How much the cache ``root`` holds, in words: ``2.3 MB in 12 entries``."""
    size = entries = 0
    for folder, _, names in os.walk(root):
        if Path(folder).parent == root and (Path(folder) / OUTPUTS).is_file():
            entries += 1
        for name in names:
            with contextlib.suppress(OSError):  # gone meanwhile
                size += (Path(folder) / name).lstat().st_size
    return f"{_megabytes(size)} in {entries} entr{'y' if entries == 1 else 'ies'}"


def unwritable(error: OSError, root: Path, what: str) -> StageError:
    """A :class:`~bayesflow.errors.StageError` that says why writing ``what`` into the cache
    folder ``root`` failed and what to do: a full disk (or quota) is named as such, with
    what the cache itself holds."""
    if error.errno in FULL:
        return StageError(
            f"no space left on the disk that holds the cache {root} (writing {what}: "
            f"{error.strerror or error}); free some space there (`df -h {root}` shows it) and "
            "run again: finished stages are kept and only unfinished ones are computed again. "
            f"The cache itself holds {_footprint(root)} (`rm -rf {root}` frees it all, and "
            "every stage is then computed again); or set `execution.cache_dir` to a folder "
            "on a disk with room"
        )
    return StageError(
        f"cannot write {what} into the cache {root} ({error.strerror or error}); check that "
        "`execution.cache_dir` names a folder you can write, or choose another"
    )


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


@dataclass(frozen=True)
class Entry:
    """A finished stage's outputs: a folder and its small values."""

    key: str
    folder: Path
    values: dict[str, Any]

    def file(self, name: str) -> Path:
        """The path of one output file."""
        return self.folder / name


def _host_tag() -> str:
    """Eight hex digits naming this host in staging folder names (host names may hold
    any character; a hash of one is safe in a file name)."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except (OverflowError, ValueError):  # not a pid at all
        return False
    return True


def _abandoned(name: str) -> bool:
    """Whether a ``.staging-``/``.trash-`` folder belongs to no live process of this host.

    Folders from another host are left to it; folders named before pids were recorded
    (``.staging-<key>-<random>``) are abandoned, since no live version writes them.
    """
    parts = name.split("-")
    if len(parts) < 5 or not parts[1].isdigit():
        return True
    if parts[2] != _host_tag():
        return False
    return not _process_alive(int(parts[1]))


class Cache:
    """Finished stage outputs under ``root``, keyed by stage key."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _folder(self, key: str) -> Path:
        return self.root / key

    # ------------------------------------------------------------------- the run lock

    def lock(
        self, wait: bool = True, timeout: float | None = None, notify: Callable[[str], None] | None = None
    ) -> FileLock:
        """The lock one run holds on this cache, as a context manager (``<root>/.lock``).

        Args:
            wait: wait for another run that holds it; False raises at once.
            timeout: seconds to wait at most; None waits until the other run ends.
            notify: called once with the "waiting for run PID ..." line (default:
                printed to standard error).

        Raises:
            CacheLockError: the lock is busy and ``wait`` is False or ``timeout`` passed.
        """
        return FileLock(self.root / LOCK_NAME, wait=wait, timeout=timeout, notify=notify,
                        name=f"cache {self.root}")

    @staticmethod
    def holding_lock(folder_of: Callable[[Any], str | Path]) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so it holds the lock of the cache folder ``folder_of(its
        first argument)`` while it runs, waiting as ``BAYESFLOW_LOCK_TIMEOUT`` says
        (see :func:`bayesflow.dag.lock.wait_from_environment`)."""

        def lock_of(subject: Any) -> FileLock:
            wait, timeout = wait_from_environment()
            return Cache(folder_of(subject)).lock(wait=wait, timeout=timeout)

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            return holding(function, lock_of)

        return decorate

    # ---------------------------------------------------------------------- entries

    def holds(self, key: str) -> bool:
        """Whether an entry of ``key`` exists (not checked: :meth:`get` checks it)."""
        return self._folder(key).exists()

    def get(self, key: str) -> Entry | None:
        """The finished entry of ``key``; None when there is none or it cannot be trusted
        (then a :class:`CacheWarning` names the file at fault)."""
        folder = self._folder(key)
        if not folder.exists():
            return None
        values, problem = _read_mapping(folder / OUTPUTS)
        if values is None:
            _warn(f"{folder / OUTPUTS} {problem or 'is missing'}; the stage will be recomputed")
            return None
        problem = self._damaged_files(folder)
        if problem:
            _warn(f"{folder}: {problem}; the stage will be recomputed")
            return None
        return Entry(key, folder, values)

    def _damaged_files(self, folder: Path) -> str:
        """What is wrong with ``manifest.json`` or the files it lists, or "" when nothing is
        (entries written before manifests existed are taken as they are)."""
        manifest, problem = _read_mapping(folder / MANIFEST)
        if problem:
            return f"{MANIFEST} {problem}"
        for name, size in sorted((manifest or {}).items()):
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != size:
                return f"{name} has {path.stat().st_size} bytes, {size} were written"
        return ""

    def staging(self, key: str) -> Path:
        """A fresh private folder to write ``key``'s outputs into before :meth:`commit`."""
        prefix = f".staging-{os.getpid()}-{_host_tag()}-{key}-"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(dir=self.root, prefix=prefix))
        except OSError as error:
            raise unwritable(error, self.root, f"a staging folder for stage {key}") from None

    def commit(self, key: str, staging: Path, values: dict[str, Any]) -> Entry:
        """Make ``staging`` the finished entry of ``key`` in one atomic rename.

        Raises:
            StageError: the entry cannot be written (a full disk is named as such);
                nothing of it is left in the cache, so the stage is computed again.
        """
        try:
            files = sorted(p for p in staging.rglob("*") if p.is_file())
            manifest = {p.relative_to(staging).as_posix(): p.stat().st_size for p in files}
            write_json_atomic(staging / MANIFEST, manifest)
            write_json_atomic(staging / OUTPUTS, values)
            target = self._folder(key)
            if target.exists():  # a forced rerun, or an entry found damaged, is replaced
                self._remove(target, key)
        except OSError as error:
            raise unwritable(error, self.root, f"the entry of stage {key}") from None
        try:
            os.replace(staging, target)
        except OSError as error:
            # Another process committed the same key in between (runs that share a cache
            # without its lock): outputs are a function of the key, so keep theirs.
            found = self.get(key)
            if found is None:
                raise unwritable(error, self.root, f"the entry of stage {key}") from None
            self.discard(staging)
            return found
        return Entry(key, target, values)

    def _remove(self, folder: Path, key: str) -> None:
        """Move ``folder`` out of the way in one rename, then delete it."""
        trash = Path(tempfile.mkdtemp(dir=self.root, prefix=f".trash-{os.getpid()}-{_host_tag()}-{key}-"))
        os.replace(folder, trash / key)
        shutil.rmtree(trash, ignore_errors=True)

    def explain(self, error: BaseException, key: str) -> BaseException:
        """The error a stage of ``key`` raised, or the :func:`unwritable` error naming the
        cache when it is a full disk under the cache (a stage writes its files into its
        staging folder only: a full disk with no file named, while the cache's disk has no
        room, is that one)."""
        if not isinstance(error, OSError) or error.errno not in FULL:
            return error
        named = error.filename
        if named is not None:
            inside = Path(os.path.abspath(str(named))).is_relative_to(os.path.abspath(self.root))
        else:
            try:
                inside = shutil.disk_usage(self.root).free < NEARLY_FULL
            except OSError:  # the cache folder itself is gone
                inside = False
        return unwritable(error, self.root, f"the files of stage {key}") if inside else error

    def discard(self, staging: Path) -> None:
        """Remove an unfinished staging folder."""
        shutil.rmtree(staging, ignore_errors=True)

    def clean_staging(self) -> int:
        """Remove staging folders left by processes of this host that are no longer
        running (never those of a live one); return how many."""
        if not self.root.exists():
            return 0
        leftovers = [
            path for path in self.root.iterdir()
            if path.name.startswith(LEFTOVER_PREFIXES) and _abandoned(path.name)
        ]
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        return len(leftovers)

    # -------------------------------------------------------------- records and index

    def record(self, key: str, name: str) -> dict[str, Any] | None:
        """A side record of ``key`` (e.g. its MLflow run); None when there is none or it
        cannot be read (then a :class:`CacheWarning` names it)."""
        path = self.root / f"{key}.{name}.json"
        record, problem = _read_mapping(path)
        if problem:
            _warn(f"{path} {problem}; it is ignored and will be written again")
        return record

    def write_record(self, key: str, name: str, payload: dict[str, Any]) -> None:
        """Write a side record of ``key`` atomically.

        Raises:
            StageError: it cannot be written (a full disk is named as such).
        """
        try:
            write_json_atomic(self.root / f"{key}.{name}.json", payload)
        except OSError as error:
            raise unwritable(error, self.root, f"the {name} record of stage {key}") from None

    def _index_path(self, workflow: str) -> Path:
        return self.root / "index" / f"{workflow}.json"

    def index(self, workflow: str) -> dict[str, dict[str, Any]]:
        """Stage name → ``{"key", "config"}`` it last finished under, for ``workflow``;
        entries that cannot be read are left out (with a :class:`CacheWarning`)."""
        path = self._index_path(workflow)
        index, problem = _read_mapping(path)
        if problem:
            _warn(f"{path} {problem}; stale stages will show as new")
        if index is None:
            return {}
        kept = {
            name: item for name, item in index.items()
            if isinstance(item, dict) and isinstance(item.get("key"), str)
        }
        if len(kept) < len(index):
            _warn(f"{path}: {len(index) - len(kept)} entries are not {{key, config}} mappings; they are ignored")
        return kept

    def write_index(self, workflow: str, index: dict[str, dict[str, Any]]) -> None:
        """Replace ``workflow``'s index atomically. The index only explains stale stages,
        so a write that fails (a full disk) is a :class:`CacheWarning`, not an error."""
        try:
            write_json_atomic(self._index_path(workflow), index)
        except OSError as error:
            _warn(f"{self._index_path(workflow)} could not be written ({error.strerror or error}); "
                  "a later plan may call changed stages new instead of stale")
