"""Real hostile surroundings for the chaos tests: a small tmpfs that fills up, a
read-only bind mount (root ignores permission bits, so ``chmod`` cannot make a folder
read-only for it).

Both need root and mount(8). A test that cannot have them is skipped, saying why (CI
runs as root; a laptop usually does not). Every mount is taken back when the test ends,
whatever happens in it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["fill", "read_only", "tmpfs"]


def _mount(*arguments: str) -> None:
    """Run mount(8); skip the test when this machine does not let it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs or a read-only bind mount")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("needs mount(8) and umount(8)")
    done = subprocess.run(["mount", *arguments], capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"mount {' '.join(arguments)} is refused here: {done.stderr.strip()}")


def _unmount(folder: Path) -> None:
    # Lazily: a process of the test still inside the folder must not keep it mounted.
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


@contextmanager
def tmpfs(folder: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` (made if missing) while the block runs."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        _unmount(folder)


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` bound read-only onto itself while the block runs: every write into it
    fails with ``EROFS``, for root too."""
    _mount("--bind", str(folder), str(folder))
    try:
        _mount("-o", "remount,ro,bind", str(folder))
        yield folder
    finally:
        _unmount(folder)


def fill(folder: Path) -> Path:
    """Write a file into ``folder`` until its disk is full; return the file (delete it to
    free the space)."""
    filler = folder / "filler"
    block = b"\0" * 4096
    with open(filler, "wb", buffering=0) as stream:
        try:
            while True:
                stream.write(block)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return filler
