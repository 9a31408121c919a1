"""One run at a time per cache folder: a file lock that a killed process gives back.

A run takes ``<cache>/.lock`` with ``fcntl.flock``. The kernel releases the lock when the
process that holds it ends, however it ends (SIGKILL and power loss included), so a stale
lock never has to be cleared by hand: the next run simply gets it. The holder writes who
it is into the file (pid, host, start time, command line) so that a second run can say
whom it waits for. Snakemake and DVC lock their working folders in the same spirit; they
refuse at once, a bayesflow run waits by default, since it then reuses what the first
run computed.

Within one process the lock is re-entrant for the thread that holds it, so the command
line may take it (to choose how long to wait) before calling :func:`bayesflow.run`,
which takes it again. On NFS, ``flock`` is emulated with POSIX record locks (Linux since
2.6.12), which work across clients as long as the server supports them.
"""

from __future__ import annotations

import errno
import functools
import inspect
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from bayesflow.errors import CacheLockError

try:  # POSIX only; elsewhere the lock is a no-op with a warning (see FileLock)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_NAME", "TIMEOUT_VARIABLE", "FileLock", "Holder", "holding", "read_holder", "wait_from_environment",
]

P = ParamSpec("P")
R = TypeVar("R")

LOCK_NAME = ".lock"
TIMEOUT_VARIABLE = "BAYESFLOW_LOCK_TIMEOUT"
# How often a waiting run tries the lock again: often enough that a queue of runs loses
# well under a second per hand-over, rarely enough to cost nothing.
POLL_SECONDS = 0.2
# A command line longer than this is cut in the lock file and in messages.
COMMAND_CHARACTERS = 200


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: written into the lock file by the process that takes it."""

    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def current(cls) -> Holder:
        """This process."""
        return cls(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S"), _command())

    def describe(self) -> str:
        """``run PID 1234 (bayesflow run spec.yaml) started at 2025-01-31 12:00:00``."""
        host = "" if self.host == socket.gethostname() else f" on host {self.host}"
        return f"run PID {self.pid}{host} ({self.command}) started at {self.started}"


def _command() -> str:
    """This process's command line as typed: ``bayesflow run spec.yaml``, ``python -m
    bayesflow.cli run spec.yaml``, ``python -c ... ARGS`` (the code left out)."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    words = sys.argv[1:]
    if program == "-c":
        program = "python -c ..."
    elif program == "__main__.py" and "-m" in sys.orig_argv[:-1]:
        program = f"python -m {sys.orig_argv[sys.orig_argv.index('-m') + 1]}"
    command = " ".join([program, *words])
    return command if len(command) <= COMMAND_CHARACTERS else command[: COMMAND_CHARACTERS - 3] + "..."


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in the lock file ``path``; None when it is absent or unreadable
    (for example between the moment a run takes the lock and the moment it writes it)."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def wait_from_environment() -> tuple[bool, float | None]:
    """``(wait, timeout)`` from ``BAYESFLOW_LOCK_TIMEOUT``: unset or empty waits until the
    holder finishes, ``0`` refuses at once, a number waits that many seconds.

    Raises:
        CacheLockError: the variable is not a number of seconds.
    """
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not value:
        return True, None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise CacheLockError(
            f"{TIMEOUT_VARIABLE}={value!r} is not a number of seconds; set it to 0 to refuse "
            "at once when another run holds the cache, to N to wait N seconds, or unset it to wait"
        )
    return seconds > 0, seconds


@dataclass
class _Held:
    thread: int
    descriptor: int
    depth: int


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


class FileLock:
    """An exclusive lock on ``path``, as a context manager.

    Args:
        path: the lock file (created, with its folder, when missing; never deleted, since
            deleting a lock file that another process has open would let two in).
        wait: wait for the holder to finish; False refuses at once.
        timeout: seconds to wait at most; None waits until the holder finishes.
        notify: called once with the "waiting for ..." line when the lock is busy
            (default: print it to standard error).
        name: what the lock guards, for messages (default: the lock file's folder).
        fix: what a refused process can do, ending the busy message (default: the
            advice for a cache folder).

    Raises:
        CacheLockError: on entry, when the lock is busy and ``wait`` is False or
            ``timeout`` passed; the message names the holder and the fix.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        wait: bool = True,
        timeout: float | None = None,
        notify: Callable[[str], None] | None = None,
        name: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.fix = fix
        self.wait, self.timeout = wait, timeout
        self.notify = notify or _print_to_stderr
        self.name = name or f"cache {self.path.parent}"
        self._key: str | None = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock (again, if this thread holds it already)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise self._unwritable(error) from error
        key = str(self.path.resolve())
        with _GUARD:
            held = _HELD.get(key)
            if held is not None and held.thread == threading.get_ident():
                # No second descriptor: where flock is emulated by POSIX locks (NFS),
                # closing any descriptor of the file would release the lock.
                held.depth += 1
                self._key = key
                return
        if fcntl is None:  # pragma: no cover - Windows
            import warnings

            warnings.warn(f"{self.name}: no file locks on this platform; do not start two runs on it at once",
                          stacklevel=2)
            return
        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise self._unwritable(error) from error
        try:
            self._take(descriptor)
            self._record(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        with _GUARD:
            _HELD[key] = _Held(threading.get_ident(), descriptor, 1)
        self._key = key

    def release(self) -> None:
        """Give the lock back (the outermost release of a re-entered lock does)."""
        key, self._key = self._key, None
        if key is None:
            return
        with _GUARD:
            held = _HELD[key]
            held.depth -= 1
            if held.depth:
                return
            del _HELD[key]
        os.ftruncate(held.descriptor, 0)  # the holder's record goes with the lock
        os.close(held.descriptor)  # closing the descriptor releases the flock

    def _take(self, descriptor: int) -> None:
        """Lock ``descriptor``, polling while another process holds it."""
        assert fcntl is not None
        began = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            waited = time.monotonic() - began
            if not self.wait or (self.timeout is not None and waited >= self.timeout):
                raise CacheLockError(self._busy_message(waited))
            if not told:
                self.notify(f"waiting for {self._holder()} ({self.name}) to finish; Ctrl-C to stop")
                told = True
            left = POLL_SECONDS if self.timeout is None else min(POLL_SECONDS, self.timeout - waited)
            time.sleep(max(left, 0.0))

    @staticmethod
    def _record(descriptor: int) -> None:
        """Write who holds the lock into it. The record only names the holder in another
        run's messages: on a full disk the lock is held without it, and the first write
        that matters names the disk."""
        payload = json.dumps(asdict(Holder.current())).encode()
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, payload, 0)
        except OSError:
            os.ftruncate(descriptor, 0)  # no half record: "another process" until a full one

    def _unwritable(self, error: OSError) -> CacheLockError:
        head = f"{self.name}: cannot create the lock file {self.path} ({error.strerror or error})"
        if error.errno == errno.EROFS:  # a read-only mount: nothing in it can be written
            return CacheLockError(
                f"{head}: the folder is on a read-only file system, and a run writes its "
                "stages there. Remount it read-write, or give the run a folder on a writable "
                "disk: `bayesflow run SPEC execution.cache_dir=<folder>`"
            )
        return CacheLockError(
            f"{head}; check that execution.cache_dir names a folder you can write, or choose another"
        )

    def _holder(self) -> str:
        holder = read_holder(self.path)
        return holder.describe() if holder is not None else "another process"

    def _busy_message(self, waited: float) -> str:
        what = f"waited {waited:.0f} s for" if self.wait else "in use by"
        if self.fix is not None:
            return f"{self.name}: {what} {self._holder()}; {self.fix}"
        return (
            f"{self.name}: {what} {self._holder()}; let it finish and run again (finished "
            f"stages are reused), give this run its own `execution.cache_dir`, or set "
            f"{TIMEOUT_VARIABLE} (seconds to wait; unset waits until it finishes)"
        )


def _print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def holding(function: Callable[P, R], lock_of: Callable[[Any], FileLock]) -> Callable[P, R]:
    """``function`` made to hold ``lock_of(its first argument)`` while it runs."""
    first = next(iter(inspect.signature(function).parameters))

    @functools.wraps(function)
    def locked(*args: P.args, **options: P.kwargs) -> R:
        with lock_of(args[0] if args else options[first]):
            return function(*args, **options)

    return locked
