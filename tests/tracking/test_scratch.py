"""Per-process temporary folders (``tracking/scratch.py``): the pyfunc templates of a killed
process are swept by the next process that keeps templates; a live process's are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bayesflow.tracking.scratch import process_folder, start_time, sweep

PREFIX = "bayesflow-pyfunc-"

# A process that keeps a pyfunc template as a fit's logging does, says where, and waits.
KEEPER = """
import sys, time
from pathlib import Path
from bayesflow.tracking import pyfunc
model = Path(sys.argv[1])
(model / "MLmodel").parent.mkdir(parents=True, exist_ok=True)
(model / "MLmodel").write_text("flavors: {}")
pyfunc._keep_template("signature", model)
print(pyfunc._TEMPLATE_ROOT[0].name, flush=True)
time.sleep(600)
"""


def keeper(folder: Path) -> tuple[subprocess.Popen[str], Path]:
    """A subprocess that kept a template with ``folder`` as its temporary folder, and its
    template folder."""
    checkout = str(Path(__file__).parents[2])
    environment = {**os.environ, "TMPDIR": str(folder), "PYTHONPATH": checkout}
    process = subprocess.Popen(
        [sys.executable, "-c", KEEPER, str(folder / "saved")], stdout=subprocess.PIPE, text=True,
        env=environment,
    )
    assert process.stdout is not None
    root = Path(process.stdout.readline().strip())
    assert root.parent == folder and root.name.startswith(f"{PREFIX}{process.pid}-"), root
    return process, root


@pytest.mark.slow
def test_a_killed_process_templates_are_swept_by_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL leaves a process's template folder behind; the next process folder made in
    the same temporary folder removes it, and leaves a running process's alone."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, left = keeper(tmp_path)
    running, kept = keeper(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        assert left.is_dir()  # what a killed process leaves
        mine = process_folder(PREFIX)
        assert not left.exists() and kept.is_dir() and Path(mine.name).is_dir()
    finally:
        running.kill()
        running.wait(timeout=60)
    mine.cleanup()


def test_a_folder_of_a_reused_process_id_is_swept(tmp_path: Path) -> None:
    """A folder named with a live process's id but another start time was left by an
    earlier process of that id; one with the right start time, or of another prefix, stays."""
    pid = os.getpid()
    now = start_time(pid)
    assert now is not None and now != "0"
    stale = tmp_path / f"{PREFIX}{pid}-{int(now) + 1}-abc"
    current = tmp_path / f"{PREFIX}{pid}-{now}-abd"
    other = tmp_path / f"someone-else-{pid}-{int(now) + 1}-abe"
    for folder in (stale, current, other):
        folder.mkdir()
    assert sweep(PREFIX, tmp_path) == [stale]
    assert not stale.exists() and current.is_dir() and other.is_dir()
