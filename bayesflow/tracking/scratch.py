"""Per-process folders in the system's temporary folder, swept once their process is gone.

A process keeps some files for its whole life (the pyfunc model templates of
:mod:`bayesflow.tracking.pyfunc`) in a :class:`tempfile.TemporaryDirectory`, which a clean
exit removes. A killed process (a stopped run's pool workers, a SIGKILL, an out-of-memory
kill) removes nothing: 208 such folders, 300 MB, gathered in a day on one machine. So each
folder's name carries its process's id and start time, ``<prefix><pid>-<start>-<random>``,
and :func:`process_folder` first sweeps the folders of the same prefix whose process no
longer runs: no process of that id, or one started at another time (the id was reused).

The start time is the kernel's (``/proc/<pid>/stat``, field 22, clock ticks since boot) on
Linux, or psutil's ``create_time`` where psutil is installed; where neither is available it
is ``0`` and only the id is checked. Folders of other users, and the unnamed folders of
older versions, are left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["process_folder", "start_time", "sweep"]

UNKNOWN = "0"


def start_time(pid: int) -> str | None:
    """When process ``pid`` started, as a token that differs between two processes of the
    same id; None when there is no such process; :data:`UNKNOWN` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stream:
            # The command name (field 2) may hold spaces and parentheses: split after it.
            return stream.read().rpartition(")")[2].split()[19]
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
    except (OSError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return _exists(pid)
    try:
        return str(int(psutil.Process(pid).create_time() * 100))
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return UNKNOWN


def _exists(pid: int) -> str | None:
    """:data:`UNKNOWN` when process ``pid`` exists, None when it does not; on Windows, where
    signal 0 would not be a probe, every process counts as existing."""
    if sys.platform == "win32":
        return UNKNOWN
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # PermissionError: it exists, under another user
        return UNKNOWN
    return UNKNOWN


def sweep(prefix: str, folder: Path | None = None) -> list[Path]:
    """Remove the folders ``<prefix><pid>-<start>-*`` in ``folder`` (the system's temporary
    folder) whose process no longer runs; return them."""
    parent = Path(folder or tempfile.gettempdir())
    pattern = re.compile(rf"{re.escape(prefix)}(\d+)-(\d+)-")
    removed = []
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            found = pattern.match(path.name)
            if found is None or not _ours(path):
                continue
            now = start_time(int(found.group(1)))
            recorded = found.group(2)
            if now is None or (UNKNOWN not in (now, recorded) and now != recorded):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _ours(path: Path) -> bool:
    """Whether ``path`` is a folder of this user (not a link)."""
    try:
        status = path.lstat()
    except OSError:
        return False
    owner = getattr(os, "getuid", None)
    return path.is_dir() and not path.is_symlink() and (owner is None or status.st_uid == owner())


def process_folder(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder of this process named ``<prefix><pid>-<start>-<random>``, made
    after sweeping the folders of ``prefix`` that processes no longer running left."""
    sweep(prefix)
    pid = os.getpid()
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{pid}-{start_time(pid) or UNKNOWN}-")
