"""Spec files are read only if regular and never past the size limit: /dev/zero, a named
pipe or a huge file is refused at once with a located message, exit code 3."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec.load import MAX_SPEC_BYTES, load_spec
from tests.conftest import TINY_SPEC, write

BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]


def validate(path: Path | str) -> subprocess.CompletedProcess[str]:
    """`bayesflow validate PATH` in a fresh process, killed if it takes 60 s."""
    return subprocess.run([*BAYESFLOW, "validate", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def refusal(path: Path | str, what: str) -> str:
    """The whole message for a spec path that is not a regular file."""
    return (
        f"error: {path}: invalid workflow spec (1 problem):\n"
        f"  - {path}: is {what}, not a regular file; pass a workflow .yaml file\n"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused_at_once() -> None:
    """`bayesflow validate /dev/zero` used to read until memory ran out (MemoryError, exit 1)."""
    started = time.perf_counter()
    result = validate("/dev/zero")
    assert (result.returncode, result.stderr) == (3, refusal("/dev/zero", "a character device"))
    assert time.perf_counter() - started < 30  # the interpreter's start-up; the refusal is instant


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """A FIFO used to hang `validate` until something wrote to it."""
    pipe = tmp_path / "spec.yaml"
    os.mkfifo(pipe)
    result = validate(pipe)
    assert (result.returncode, result.stderr) == (3, refusal(pipe, "a named pipe"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_base_spec_that_is_a_pipe_is_refused(tmp_path: Path) -> None:
    """`extends` reads its base through the same guard."""
    os.mkfifo(tmp_path / "base.yaml")
    path = write(tmp_path, "extends: base.yaml\nname: x\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.problems == [
        f"{tmp_path / 'base.yaml'}: is a named pipe, not a regular file; pass a workflow .yaml file"
    ]


def test_a_file_past_the_limit_is_refused_unread(tmp_path: Path) -> None:
    """A file of the limit plus one byte is refused with its size and the limit."""
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_SPEC_BYTES + 1))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.problems == [(
        f"{path}: file is {MAX_SPEC_BYTES + 1} bytes, more than the {MAX_SPEC_BYTES} a spec may have; "
        "is this the right file?"
    )]


def test_a_symlink_to_a_spec_is_read(tmp_path: Path) -> None:
    """A link to a regular file is that file."""
    target = write(tmp_path, TINY_SPEC)
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert load_spec(link).spec.name == "tiny"
