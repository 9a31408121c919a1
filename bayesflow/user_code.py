"""Running a user's own code: a ``python:`` model's module and factory, a ``data: python``
module and function. Whatever that code does, bayesflow ends with a message that names the
spec key, the user's file and line, and the fix (exit code 3), never with a traceback of
bayesflow's internals (``--debug`` shows the whole chain):

- an exception, ``SyntaxError`` and ``ImportError`` included, raised by the code;
- ``sys.exit()`` (``SystemExit``), which would otherwise end bayesflow quietly, perhaps
  with exit code 0 and nothing done;
- code that never returns control (an endless loop at import or in the factory): it is
  stopped after ``BAYESFLOW_USER_CODE_TIMEOUT`` seconds (default 600; ``0`` for no limit)
  and the message says where it was. In the main thread a ``SIGALRM`` timer interrupts it
  (a ``time.sleep`` too); in another thread the exception is raised in that thread
  between two bytecodes (a call blocked inside C code is stopped when it returns).

``Ctrl-C`` (``KeyboardInterrupt``) is not caught: it stops the run as everywhere else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TypeVar

from bayesflow.errors import SpecError

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_VARIABLE", "run_user_code", "user_frame", "user_timeout"]

TIMEOUT_VARIABLE = "BAYESFLOW_USER_CODE_TIMEOUT"
# Ten minutes: far longer than importing a module or building a network takes, and long
# enough for a data function that reads a large file; a loop that never ends still ends.
DEFAULT_TIMEOUT = 600.0
# A message quotes at most this much of what the user's code said (an exception's text).
SHOWN = 300
_PACKAGE = str(Path(__file__).resolve().parent) + os.sep
# Where installed libraries live: a frame there is a library's, not the user's own code.
_LIBRARIES = tuple(
    {str(Path(sysconfig.get_paths()[name]).resolve()) + os.sep for name in ("stdlib", "purelib", "platlib")}
)
Result = TypeVar("Result")


class _Stuck(BaseException):
    """Raised into user code that ran past the time limit (a BaseException, so that the
    user's own ``except Exception`` does not swallow it)."""


def user_timeout() -> float | None:
    """The time limit of one import or call of user code in seconds (None: no limit).

    Raises:
        SpecError: ``BAYESFLOW_USER_CODE_TIMEOUT`` is not a number.
    """
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        raise SpecError(
            f"{TIMEOUT_VARIABLE}={text[:40]!r}: expected seconds (such as 600), or 0 for no limit"
        ) from None
    return seconds if seconds > 0 and seconds != float("inf") else None


def _shorten(text: str, limit: int = SHOWN) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def user_frame(error: BaseException, files: Sequence[str | Path] = ()) -> str:
    """Where in the user's code ``error`` was raised: ``path:line in function: `source```.

    The deepest frame in one of ``files`` (the user's module) if any, else the deepest
    frame outside bayesflow, Python's import machinery and the installed libraries, else
    the deepest outside bayesflow and the import machinery; for a SyntaxError,
    the line it names. Empty when no such frame exists.
    """
    if isinstance(error, SyntaxError) and error.filename:
        text = f" `{_shorten(error.text, 80)}`" if error.text and error.text.strip() else ""
        return f"{error.filename}:{error.lineno}{text}"
    frames = traceback.extract_tb(error.__traceback__)
    wanted = {str(Path(file).resolve()) for file in files}
    outside = [
        frame for frame in frames
        if not frame.filename.startswith(("<frozen", _PACKAGE))
        and "importlib" not in Path(frame.filename).parts
    ]
    chosen = (
        [frame for frame in outside if str(Path(frame.filename).resolve()) in wanted]
        or [frame for frame in outside if not frame.filename.startswith(_LIBRARIES)]
        or outside
    )
    if not chosen:
        return ""
    frame = chosen[-1]
    source = f": `{_shorten(frame.line, 80)}`" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{source}"


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`_Stuck` in the main thread after ``seconds`` (SIGALRM)."""

    def stop(signum: int, frame: object) -> None:
        raise _Stuck

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _thread_timer(seconds: float) -> Iterator[None]:
    """Raise :class:`_Stuck` in this (not main) thread after ``seconds``."""
    ident = threading.get_ident()
    lock = threading.Lock()
    done = [False]

    def stop() -> None:
        with lock:
            if not done[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Stuck))

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            done[0] = True
        timer.cancel()


def _watchdog(seconds: float | None) -> AbstractContextManager[None]:
    """The timer that stops user code after ``seconds`` (none for None)."""
    if seconds is None:
        return nullcontext()
    main = threading.current_thread() is threading.main_thread()
    # Another SIGALRM timer running (the caller's own) is left alone.
    if main and hasattr(signal, "setitimer") and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        return _alarm(seconds)
    return _thread_timer(seconds)


def run_user_code(
    call: Callable[[], Result],
    key: str,
    what: str,
    files: Sequence[str | Path] = (),
    passthrough: tuple[type[BaseException], ...] = (),
) -> Result:
    """``call()``, the user's code, with whatever it does turned into a located SpecError.

    Args:
        call: imports or calls the user's code.
        key: the spec key that names the code (``model.python``, ``data.module``).
        what: what ``call`` does, for the message (``importing module 'nets'``).
        files: the user's own files, preferred when naming where something happened.
        passthrough: exception types the caller turns into messages of its own (a
            module that is not found), re-raised as they are.

    Raises:
        SpecError: the code raised, called ``sys.exit`` or did not return within
            :func:`user_timeout` seconds.
    """
    seconds = user_timeout()
    try:
        with _watchdog(seconds):
            return call()
    except passthrough:
        raise
    except _Stuck as error:
        where = user_frame(error, files) or "an unknown place"
        raise SpecError(
            f"{key}: {what} did not return within {seconds:g} s; it was stopped at {where}. "
            f"Make the code return (an endless loop? a wait for input?), or allow it more time "
            f"with {TIMEOUT_VARIABLE}=<seconds> (0 for no limit)"
        ) from None
    except SystemExit as error:
        where = user_frame(error, files)
        raise SpecError(
            f"{key}: {what} called sys.exit({_shorten(repr(error.code), 80)})"
            + (f" at {where}" if where else "")
            + "; code that bayesflow imports or calls must return (or raise), not end the "
            "program: remove the call, or put it under `if __name__ == \"__main__\":`"
        ) from error
    except SyntaxError as error:
        raise SpecError(
            f"{key}: {what} failed: SyntaxError at {user_frame(error, files)}: "
            f"{_shorten(error.msg)}; fix the file"
        ) from error
    except Exception as error:
        where = user_frame(error, files)
        raise SpecError(
            f"{key}: {what} raised {type(error).__name__}: {_shorten(str(error))}"
            + (f" at {where}" if where else "")
            + "; fix the code"
        ) from error
