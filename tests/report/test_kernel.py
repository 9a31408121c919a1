"""Tests of the prestarted report kernel: the same notebook as a fresh kernel, and no
kernel process left behind after a render, a failing cell, or an unused prestart.

Each test starts real Jupyter kernels (a few seconds each)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from bayesflow.report import ReportError, kernel, render_report
from tests.waiting import HANG_SECONDS

WARM_TEMPLATE = """\
# %% tags=["parameters"]
greeting = "hello"

# %%
# %matplotlib inline
import sys

import matplotlib.pyplot as plt
import seaborn as sns

from bayesflow.report import figures

figures.apply_theme()
print("greeting:", greeting)
print("names:", sorted(name for name in globals() if not name.startswith("_")))

# %%
sns.lineplot(x=[0, 1, 2], y=[1.0, 0.5, 2.0])
plt.show()
"""

FAILING_TEMPLATE = """\
# %% tags=["parameters"]
metric = "test_nll"

# %%
raise KeyError(f"no column {metric}")
"""


@pytest.fixture(autouse=True)
def no_pending_kernel() -> Iterator[None]:
    """Shut down a prestarted kernel a test left untaken."""
    yield
    manager = kernel.take()
    if manager is not None:
        kernel.shutdown(manager)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What every :func:`kernel.take` gave the render (a manager, or None)."""
    given: list[Any] = []
    take = kernel.take

    def spy(*args: Any, **kwargs: Any) -> Any:
        given.append(take(*args, **kwargs))
        return given[-1]

    monkeypatch.setattr(kernel, "take", spy)
    return given


def _ready_pid() -> int:
    """Wait for the prestarted kernel to be ready and return its process id."""
    pending = kernel._pending
    assert pending is not None and pending.done.wait(kernel.START_TIMEOUT)
    assert not pending.failed and pending.manager is not None
    return int(pending.manager.provisioner.process.pid)


def _running(pid: int) -> bool:
    """Whether a process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _cells(path: Path) -> list[tuple[str, str, Any, Any]]:
    notebook = nbformat.read(path, as_version=4)
    return [
        (cell.cell_type, cell.source, cell.get("execution_count"), cell.get("outputs"))
        for cell in notebook.cells
    ]


def _template(folder: Path, text: str, name: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_prestarted_render_is_a_fresh_render_and_leaves_no_kernel(
    tmp_path: Path, taken: list[Any]
) -> None:
    """The same cells, outputs (figure included) and execution counts as with a fresh
    kernel, no name leaked from the warm-up, and the kernel process gone after."""
    template = _template(tmp_path, WARM_TEMPLATE, "warm")
    fresh = render_report(template, {"greeting": "bonjour"}, tmp_path / "fresh", name="warm")
    kernel.prestart()
    pid = _ready_pid()
    warm = render_report(template, {"greeting": "bonjour"}, tmp_path / "warm", name="warm")

    assert taken[0] is None and taken[1] is not None  # the second render used the kernel
    assert not _running(pid)
    assert _cells(warm.notebook) == _cells(fresh.notebook)
    printed = "".join(output.get("text", "") for *_, outputs in _cells(warm.notebook) for output in outputs or [])
    assert "greeting: bonjour" in printed and "'figures', 'get_ipython', 'greeting'" in printed
    for module in kernel.WARM_MODULES:  # the warm-up bound no name in the notebook
        assert repr(module.split(".")[0]) not in printed
    assert 'src="data:image/png;base64,' in warm.html.read_text()
    assert "<script" not in warm.html.read_text()
    assert kernel.take() is None  # one kernel serves one report


@pytest.mark.slow
def test_failing_cell_in_a_prestarted_kernel(tmp_path: Path, taken: list[Any]) -> None:
    """A cell that raises gives the error a fresh kernel gives, naming the cell and the
    kept notebook, and the kernel process is gone after."""
    template = _template(tmp_path, FAILING_TEMPLATE, "failing")
    with pytest.raises(ReportError) as fresh:
        render_report(template, {}, tmp_path / "out", name="failing")
    kernel.prestart()
    pid = _ready_pid()

    with pytest.raises(ReportError, match=r"cell 1 \(In \[2\]\) raised KeyError: 'no column test_nll'") as caught:
        render_report(template, {}, tmp_path / "out", name="failing")

    assert taken[1] is not None
    assert not _running(pid)
    assert str(caught.value) == str(fresh.value)
    assert caught.value.notebook == tmp_path / "out" / "failing.failed.ipynb"
    assert str(caught.value.notebook) in str(caught.value)
    errors = [o for *_, outputs in _cells(caught.value.notebook) for o in outputs or [] if "ename" in o]
    assert [error["ename"] for error in errors] == ["KeyError"]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before_take", "after_take"])
def test_dead_prestarted_kernel_falls_back_to_a_fresh_one(
    tmp_path: Path, taken: list[Any], monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A prestarted kernel that died is not used: the render starts its own, whether
    the death is seen when the kernel is taken or when papermill connects to it."""
    template = _template(tmp_path, WARM_TEMPLATE, "warm")
    kernel.prestart()
    pid = _ready_pid()
    process = kernel._pending.manager.provisioner.process  # type: ignore[union-attr]
    if when == "before_take":
        process.kill()
        process.wait()
    else:
        take = kernel.take

        def take_then_kill(*args: Any, **kwargs: Any) -> Any:
            manager = take(*args, **kwargs)
            process.kill()
            process.wait()
            return manager

        monkeypatch.setattr(kernel, "take", take_then_kill)

    report = render_report(template, {"greeting": "hallo"}, tmp_path / "out", name="warm")

    if when == "before_take":
        assert taken == [None]
    else:  # papermill was handed the dead kernel, then ran the notebook in a fresh one
        assert len(taken) == 1 and taken[0] is not None
    assert not _running(pid)
    printed = "".join(output.get("text", "") for *_, outputs in _cells(report.notebook) for output in outputs or [])
    assert "greeting: hallo" in printed


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["ready", "starting", "interrupted"])
def test_unused_prestarted_kernel_is_shut_down_at_exit(tmp_path: Path, ending: str) -> None:
    """A process that prestarts a kernel and never renders leaves no kernel behind: when
    the kernel was ready, still starting, or the process ended on Ctrl-C."""
    script = textwrap.dedent(
        f"""
        import time
        from bayesflow.report import kernel

        kernel.prestart()
        pending = kernel._pending
        if {ending!r} == "ready":
            assert pending.done.wait(kernel.START_TIMEOUT) and not pending.failed
        else:
            while pending.manager is None or not pending.manager.has_kernel:
                time.sleep(0.01)
        print(pending.manager.provisioner.process.pid, flush=True)
        if {ending!r} == "interrupted":
            raise KeyboardInterrupt
        """
    )
    finished = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_SECONDS, cwd=tmp_path, check=False
    )
    # Python ends on an uncaught KeyboardInterrupt by SIGINT; nothing else may complain.
    assert finished.returncode == (-signal.SIGINT if ending == "interrupted" else 0), finished.stderr
    assert finished.stderr.count("Traceback") == (ending == "interrupted"), finished.stderr
    pid = int(finished.stdout.split()[0])
    assert not _running(pid)


@pytest.mark.slow
def test_a_forked_child_leaves_the_parents_kernel_alone() -> None:
    """A child forked from a process with a prestarted kernel (a user's model may fork)
    does not kill the parent's kernel at its exit."""
    kernel.prestart()
    pid = _ready_pid()
    child = os.fork()
    if child == 0:  # the child runs the exit handler, then leaves without pytest's
        kernel._shutdown_all()
        os._exit(0)
    os.waitpid(child, 0)

    assert _running(pid)
    manager = kernel.take()
    assert manager is not None
    kernel.shutdown(manager)
    assert not _running(pid)


@pytest.mark.slow
def test_a_kernel_not_ready_in_time_is_shut_down_by_its_thread() -> None:
    """take() that gives up waiting returns None, and the kernel, once started, is shut
    down by the thread that started it."""
    kernel.prestart()
    pending = kernel._pending
    assert pending is not None

    assert kernel.take(timeout=0) is None

    assert pending.done.wait(kernel.START_TIMEOUT) and pending.abandoned
    process = pending.manager.provisioner.process if pending.manager is not None else None
    assert process is None or not _running(process.pid)
    assert kernel.take() is None


@pytest.mark.slow
def test_a_kernel_no_report_took_is_discarded_when_the_run_ends() -> None:
    """prestarted(True): a run whose report did not render (a stage failed, Ctrl-C)
    leaves no kernel behind, whether it was ready or still starting when the run ended."""
    with pytest.raises(KeyboardInterrupt), kernel.prestarted(True):
        pid = _ready_pid()
        raise KeyboardInterrupt
    assert not _running(pid) and kernel._pending is None

    with kernel.prestarted(True):
        pending = kernel._pending
        assert pending is not None
    assert pending.done.wait(kernel.START_TIMEOUT)
    process = pending.manager.provisioner.process if pending.manager is not None else None
    assert process is None or not _running(process.pid)

    with kernel.prestarted(False):
        assert kernel._pending is None
