"""The report's Jupyter kernel: its private kernelspec, and one kernel started early.

Every report runs in a kernel of the interpreter bayesflow runs in (``sys.executable``):
:func:`private_kernelspec` writes a kernelspec for it into a scratch folder and puts
that folder first on ``JUPYTER_PATH``, so a system-wide ``python3`` kernelspec that
points at another interpreter is never picked.

Starting that kernel and importing what the templates import (numpy, pandas,
matplotlib, seaborn, :mod:`bayesflow.report`) took ~3 s of the default workflow's
report stage (~1.5 s from the kernel's launch to its first reply, ~1.6 s for the
template's import cell, on 2 cores at load ~2.5). :func:`prestart` does both in a
background thread while the fits run (~2 s of CPU in the kernel, 0.1 s in this
process); :func:`take` hands the ready kernel to one render, which kills it after
(:func:`shutdown`). The report stage went from 7.05 s to 3.92 s (medians of three
``cold_posterior`` runs, load 2.5-3.3). The warm-up only imports, as ``__import__`` calls run
silently (no execution count, no output, no name bound), so the notebook's namespace
and execution counts are those of a fresh kernel; only ``sys.modules`` differs.

A prestarted kernel serves one report: a second render in the same process starts a
fresh kernel as before, unless :func:`prestart` is called again. Every kernel started
here is shut down after its report, when it failed to start or died, and at
interpreter exit (Ctrl-C and errors included) by an ``atexit`` handler; a parent killed
outright leaves none either, since ipykernel exits when its parent process is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "KERNEL_NAME",
    "WARM_MODULES",
    "died_before_use",
    "discard",
    "display_name",
    "prestart",
    "prestarted",
    "private_kernelspec",
    "shutdown",
    "take",
    "taken",
]

KERNEL_NAME = "bayesflow-python"
"""Name of the private kernelspec that runs ``sys.executable``."""

WARM_MODULES = (
    "numpy",
    "pandas",
    "pandas.io.formats.style",  # Styler and jinja2, which the tables are displayed with
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",  # what the inline backend draws with
    "seaborn",
    "bayesflow.report.bundle",
    "bayesflow.report.experiments",
    "bayesflow.report.figures",
    "bayesflow.report.sections",
    "bayesflow.report.tables",
)
"""Modules a prestarted kernel imports before the report: those of the shipped
templates' import cells that take time (seaborn and bayesflow's report modules, with
what they import, ~1.6 s under load)."""

START_TIMEOUT = 60.0
"""Seconds a kernel may take to start and import :data:`WARM_MODULES` (papermill's
``start_timeout`` default)."""

# nbclient passes this to every kernel it starts: IPython keeps no history file.
_HISTORY_ARGUMENT = "--HistoryManager.hist_file=:memory:"

# JUPYTER_PATH is process-global: two renders in threads of one process must not undo
# each other's setting.
_ENVIRONMENT_LOCK = threading.Lock()
# Guards the prestarted kernel and the set of live kernels.
_LOCK = threading.Lock()
_live: set[Any] = set()  # kernel managers started here and not yet shut down
_pending: _Prestart | None = None
_exiting = False


@contextlib.contextmanager
def private_kernelspec(folder: Path) -> Iterator[Path]:
    """Write a kernelspec running ``sys.executable`` and put it first on JUPYTER_PATH.

    Args:
        folder: a scratch folder; the kernelspec goes to ``kernels/<KERNEL_NAME>``.

    Yields:
        The kernelspec folder. JUPYTER_PATH is restored on exit.
    """
    spec_folder = folder / "kernels" / KERNEL_NAME
    spec_folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--log-level=ERROR"],
        "display_name": display_name(),
        "language": "python",
        "metadata": {"debugger": False},
    }
    (spec_folder / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    with _ENVIRONMENT_LOCK:
        previous = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            [str(folder), *([previous] if previous else [])]
        )
        try:
            yield spec_folder
        finally:
            if previous is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = previous


def display_name() -> str:
    """The kernelspec's display name, e.g. ``bayesflow (Python 3.11.7)``."""
    version = ".".join(str(part) for part in sys.version_info[:3])
    return f"bayesflow (Python {version})"


def prestart() -> None:
    """Start a kernel and import :data:`WARM_MODULES` in it, in a background thread.

    Returns at once. Does nothing while a prestarted kernel is waiting to be taken, or
    once the interpreter is exiting.
    """
    global _pending
    # Imported here, not in the thread: a module imported by two threads at once can be
    # seen half-initialised by one of them (the render imports these too). ~0.07 s.
    import jupyter_client.manager  # noqa: F401
    import jupyter_core.utils  # noqa: F401

    with _LOCK:
        if _pending is not None or _exiting:
            return
        pending = _pending = _Prestart()
    pending.thread.start()


def take(timeout: float = START_TIMEOUT) -> Any | None:
    """The prestarted kernel's manager for one report, or None to start one as usual.

    Waits up to ``timeout`` seconds for a kernel still starting. None when
    :func:`prestart` was not called (or its kernel was taken), or the kernel did not
    start, died or is not ready in time (it is then shut down). The caller owns the
    manager returned and must :func:`shutdown` it.
    """
    global _pending
    with _LOCK:
        pending, _pending = _pending, None
    if pending is None:
        return None
    if not pending.done.wait(timeout) and pending.abandon():
        return None
    manager = pending.manager
    if manager is None or pending.failed:  # its thread shut it down
        return None
    if not _alive(manager):
        shutdown(manager)
        return None
    return manager


def discard() -> None:
    """Shut down a prestarted kernel that no report took (a run whose report stage did
    not render: an earlier stage failed, or Ctrl-C); returns at once (a kernel still
    starting is shut down by its own thread)."""
    global _pending
    with _LOCK:
        pending, _pending = _pending, None
    if pending is None or pending.abandon():
        return
    if pending.manager is not None and not pending.failed:
        shutdown(pending.manager)


@contextlib.contextmanager
def prestarted(wanted: bool) -> Iterator[None]:
    """:func:`prestart` when ``wanted``; :func:`discard` what no report took when the
    block ends, however it ends."""
    if wanted:
        prestart()
    try:
        yield
    finally:
        discard()


@contextlib.contextmanager
def taken() -> Iterator[Any | None]:
    """:func:`take`, and :func:`shutdown` of what it gave when the block ends, however."""
    manager = take()
    try:
        yield manager
    finally:
        if manager is not None:
            shutdown(manager)


def shutdown(manager: Any) -> None:
    """Kill a kernel started here and remove its connection file; never raises.

    The kernel is killed rather than asked to exit (nbclient's "graceful" shutdown): its
    notebook is done, and the request and the kernel's own exit took ~0.6 s of the
    report stage (measured).
    """
    from jupyter_core.utils import run_sync

    with _LOCK:
        _live.discard(manager)
    for client in getattr(manager, "clients", []):
        with contextlib.suppress(Exception):
            client.stop_channels()
    _kill(manager)
    with contextlib.suppress(Exception):
        run_sync(manager.cleanup_resources)()


def died_before_use(manager: Any | None, error: BaseException) -> bool:
    """Whether ``error``, raised by papermill running a notebook in ``manager``'s kernel,
    means that the prestarted kernel died before the first cell reached it (nbclient's
    RuntimeError "Kernel died before replying to kernel_info"), so that a fresh kernel
    can run the notebook instead. A kernel dying later raises nbclient's
    ``DeadKernelError``, which is reported as such."""
    from nbclient.exceptions import DeadKernelError

    return (
        manager is not None
        and isinstance(error, RuntimeError)
        and not isinstance(error, DeadKernelError)
        and not _alive(manager)
    )


class _Prestart:
    """One kernel being started in a daemon thread."""

    def __init__(self) -> None:
        self.manager: Any | None = None
        self.failed = False
        self.abandoned = False  # take() gave up waiting: the thread shuts its kernel down
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bayesflow-report-kernel", daemon=True)

    def abandon(self) -> bool:
        """Leave a kernel still starting to its thread to shut down; False when it has
        finished starting meanwhile (its manager is then the caller's)."""
        with _LOCK:
            self.abandoned = not self.done.is_set()
            return self.abandoned

    def _run(self) -> None:
        import asyncio

        try:
            asyncio.run(self._start())
        except BaseException:  # noqa: BLE001
            # The render starts its own kernel, whose failure reports itself clearly.
            self.failed = True
        finally:
            with _LOCK:
                unwanted = self.failed or self.abandoned
                if not unwanted:
                    self.done.set()
            if unwanted:  # done once no kernel of it is left
                if self.manager is not None:
                    shutdown(self.manager)
                self.done.set()

    async def _start(self) -> None:
        manager = _manager_class()(kernel_name=KERNEL_NAME)
        with (
            tempfile.TemporaryDirectory(prefix="bayesflow-kernel-") as scratch,
            private_kernelspec(Path(scratch)),
            _LOCK,  # at exit, a kernel is either never launched or in _live
        ):
            if _exiting:
                raise RuntimeError("the interpreter is exiting")
            self.manager = manager
            _live.add(manager)
            await manager.start_kernel(extra_arguments=[_HISTORY_ARGUMENT])
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=START_TIMEOUT)
            reply = await client.execute_interactive(
                _warm_up_code(),
                silent=True,
                store_history=False,
                allow_stdin=False,
                timeout=START_TIMEOUT,
                output_hook=_ignore,  # an import's warning is not this process's to print
            )
        finally:
            client.stop_channels()
            manager.clients.remove(client)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the kernel's warm-up failed: {reply['content']}")


def _warm_up_code() -> str:
    """``__import__`` of every warm module that exists, each failure ignored: a module
    the notebook then imports fails there, with its traceback, as in a fresh kernel."""
    return "".join(
        f"try:\n    __import__({name!r})\nexcept Exception:\n    pass\n" for name in WARM_MODULES
    )


def _manager_class() -> type:
    """nbclient's kernel manager class (asynchronous), recording the clients it makes
    so that :func:`shutdown` closes the one nbclient leaves open with a given manager."""
    from jupyter_client.manager import AsyncKernelManager

    class RecordingKernelManager(AsyncKernelManager):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.clients: list[Any] = []

        def client(self, **kwargs: Any) -> Any:
            client = super().client(**kwargs)
            self.clients.append(client)
            return client

    return RecordingKernelManager


def _ignore(message: dict[str, Any]) -> None:
    """Drop a message the warm-up published."""


def _process(manager: Any) -> Any | None:
    """The kernel's ``subprocess.Popen`` (jupyter_client's local provisioner holds it)."""
    return getattr(getattr(manager, "provisioner", None), "process", None)


def _alive(manager: Any) -> bool:
    process = _process(manager)
    return process is not None and process.poll() is None


def _kill(manager: Any) -> None:
    """SIGKILL the kernel and reap it, touching no socket (safe at interpreter exit)."""
    process = _process(manager)
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()
        with contextlib.suppress(Exception):
            process.wait(timeout=10)


def _forget() -> None:
    """In a forked child: the parent's kernels are not the child's to kill at its exit."""
    global _pending, _LOCK
    _LOCK = threading.Lock()
    _live.clear()
    _pending = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


@atexit.register
def _shutdown_all() -> None:
    """Kill every kernel started here that is still running, at interpreter exit."""
    global _exiting, _pending
    with _LOCK:
        _exiting = True
        _pending = None
        managers = list(_live)
    # Only the process and its connection file: at exit, the starting thread may still
    # be using the kernel's sockets, and closing them under it has hung the exit.
    for manager in managers:
        _kill(manager)
        with contextlib.suppress(Exception):
            manager.cleanup_connection_file()
