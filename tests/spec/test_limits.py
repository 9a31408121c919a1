"""Spec files are read only if regular and never past the size limit: /dev/zero, a named
pipe or a huge file is refused at once with a located message, exit code 3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load as load_module
from bayesflow.spec.load import MAX_SPEC_BYTES, load_spec
from tests.conftest import TINY_SPEC, write
from tests.spec.counting import Counting
from tests.waiting import HANG_SECONDS

BAYESFLOW = [sys.executable, "-m", "bayesflow.cli"]


def validate(path: Path | str) -> subprocess.CompletedProcess[str]:
    """`bayesflow validate PATH` in a fresh process, killed if it hangs (a pipe it waits on)."""
    return subprocess.run([*BAYESFLOW, "validate", str(path)], capture_output=True, text=True,
                          timeout=HANG_SECONDS, check=False)


def refusal(path: Path | str, what: str) -> str:
    """The whole message for a spec path that is not a regular file."""
    return (
        f"error: {path}: invalid workflow spec (1 problem):\n"
        f"  - {path}: is {what}, not a regular file; pass a workflow .yaml file\n"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bayesflow validate /dev/zero` used to read until memory ran out (MemoryError, exit 1):
    it exits 3 with the located refusal, and the loader reads not one byte of the device."""
    result = validate("/dev/zero")
    assert (result.returncode, result.stderr) == (3, refusal("/dev/zero", "a character device"))
    counting = Counting(os)
    monkeypatch.setattr(load_module, "os", counting)
    with pytest.raises(SpecError):
        load_spec(Path("/dev/zero"))
    assert counting.bytes_read == 0


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
