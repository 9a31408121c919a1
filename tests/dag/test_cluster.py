"""What a Ray task gets and sends back (values, never the driver's paths), and its errors."""

from __future__ import annotations

import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.cluster import RemoteStageError, check_reachable, remote_error, strip_colours
from bayesflow.dag.plan import Stage
from bayesflow.dag.transfer import PackedEntry, pack_entry, pack_folder, run_packed, unpack_files
from bayesflow.errors import ClusterError


class Copier:
    """A stage that reads every input file and writes their concatenation, remembering the
    folders it was given."""

    def __init__(self) -> None:
        self.folders: list[Path] = []

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        self.folders += [entry.folder for entry in inputs.values()] + [staging]
        joined = b"".join(entry.file("data.bin").read_bytes() for entry in inputs.values())
        (staging / "sub").mkdir()
        (staging / "sub" / "joined.bin").write_bytes(joined)
        return {"inputs": sorted(inputs), "sizes": [entry.values["size"] for entry in inputs.values()]}


def committed(cache: Cache, key: str, data: bytes) -> Entry:
    staging = cache.staging(key)
    (staging / "data.bin").write_bytes(data)
    return cache.commit(key, staging, {"size": len(data)})


@pytest.mark.slow
def test_a_stage_runs_on_packed_inputs_outside_the_cache(tmp_path: Path) -> None:
    """The stage reads copies of its inputs and writes into a scratch folder that is not
    the cache's; the result carries the files' bytes and the values, and the driver's
    staging folder gets exactly the files the stage wrote."""
    cache = Cache(tmp_path / "cache")
    first, second = committed(cache, "k1", b"\x00\x01abc"), committed(cache, "k2", bytes(range(256)))
    packed = {"fit/a": pack_entry(first), "fit/b": pack_entry(second)}
    assert packed["fit/a"].files == {"data.bin": b"\x00\x01abc"}  # not outputs.json, manifest.json
    assert packed["fit/b"].size == 256
    copier = Copier()
    result = run_packed(copier, Stage("evaluate/c", "evaluate", ("fit/a", "fit/b"), "k3"), packed)
    assert result.values == {"inputs": ["fit/a", "fit/b"], "sizes": [5, 256]}
    assert result.files == {"sub/joined.bin": b"\x00\x01abc" + bytes(range(256))}
    assert result.placement["pid"] > 0 and result.placement["host"] == socket.gethostname()
    for folder in copier.folders:  # nothing under the cache, and the scratch is gone
        assert not folder.is_relative_to(cache.root) and not folder.exists()
    staging = cache.staging("k3")
    unpack_files(result.files, staging)
    entry = cache.commit("k3", staging, result.values)
    assert pack_folder(entry.folder) == result.files
    assert cache.get("k3") == entry


def test_packed_files_may_not_leave_their_folder(tmp_path: Path) -> None:
    """A packed path that climbs out of its folder is refused before anything is written."""
    for name in ("../escape.bin", "/etc/escape.bin"):
        with pytest.raises(ValueError, match="may not leave its folder"):
            unpack_files({name: b"x"}, tmp_path / "inside")
    assert not (tmp_path / "escape.bin").exists()


def test_a_packed_entry_pickles_as_a_value() -> None:
    """What travels to a node is a plain value (no path of this machine in it)."""
    import pickle

    packed = PackedEntry("k", {"size": 1}, {"a.npz": b"1"})
    assert pickle.loads(pickle.dumps(packed)) == packed
    assert "/" not in repr(packed)


def _ray_task_error(cause: BaseException, remote: str) -> BaseException:
    """The error Ray 2.60 raises in the driver for a task that raised ``cause``."""
    exceptions = pytest.importorskip("ray.exceptions", reason="Ray is the optional extra")
    error = exceptions.RayTaskError(
        "run_remote", remote, cause, proctitle="ray::run_remote()", pid=4242, ip="10.1.2.3"
    )
    return error.as_instanceof_cause()


@pytest.mark.slow
def test_a_remote_failure_names_its_cause_and_node_without_colours() -> None:
    """Type, message and node on the first line; no escape codes; the remote traceback is
    a note, so the traceback ``--debug`` prints shows it."""
    remote = ("Traceback (most recent call last):\n  File \"/node/fit.py\", line 9, in fit\n"
              "FloatingPointError: loss is nan\nat step 3")
    raised = _ray_task_error(FloatingPointError("loss is nan\nat step 3"), remote)
    assert "\x1b[" in str(raised)  # what Ray itself says
    error = remote_error(raised)
    assert isinstance(error, RemoteStageError)
    assert str(error) == "FloatingPointError: loss is nan (on node 10.1.2.3, pid 4242)\nat step 3"
    detail = "".join(traceback.format_exception(error))
    assert "\x1b[" not in detail and 'File "/node/fit.py", line 9, in fit' in detail
    assert error.remote_traceback.startswith('  File "/node/fit.py"')


@pytest.mark.slow
def test_ray_system_errors_are_said_plainly() -> None:
    """A worker that died is named with Ray's words, colours removed; other errors pass."""
    exceptions = pytest.importorskip("ray.exceptions", reason="Ray is the optional extra")
    died = remote_error(exceptions.WorkerCrashedError())
    assert isinstance(died, RemoteStageError) and str(died).startswith("WorkerCrashedError: ")
    plain = OSError("disk")
    assert remote_error(plain) is plain
    assert strip_colours("\x1b[36mray::f()\x1b[39m (pid=1)") == "ray::f() (pid=1)"


def test_an_unreachable_address_fails_within_seconds_naming_it() -> None:
    """A closed port is named at once; a malformed address says the forms it takes."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ClusterError, match=rf"execution.address '127.0.0.1:{port}': nothing answers"):
        check_reachable(f"127.0.0.1:{port}", seconds=2)
    assert ClusterError("x").exit_code == 1
    with pytest.raises(ClusterError, match=r"ray://HOST:PORT"):
        check_reachable("head-without-port")
    # The forms the check leaves to Ray, and a port that answers.
    check_reachable("auto")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"ray://127.0.0.1:{server.getsockname()[1]}")


def test_resources_name_ray_options_and_custom_resources() -> None:
    """num_cpus, num_gpus and memory are Ray's options; any other name a custom resource."""
    from bayesflow.dag.cluster import task_options

    assert task_options({}) == {}
    assert task_options({"num_cpus": 2, "num_gpus": 1}) == {"num_cpus": 2, "num_gpus": 1}
    assert task_options({"num_gpus": 0.5, "big_memory": 1}) == {"num_gpus": 0.5, "resources": {"big_memory": 1}}


@pytest.mark.slow
@pytest.mark.parametrize(("gpus", "expected"), [([], "cpu"), ([0], "cuda")])
def test_auto_device_takes_cuda_only_where_the_ray_task_holds_a_gpu(
    monkeypatch: pytest.MonkeyPatch, gpus: list[int], expected: str
) -> None:
    """Ray leaves every GPU visible to a task that asked for none: ``auto`` asks Ray which
    GPUs the task holds (a double of a CUDA machine inside a Ray task)."""
    import types

    import torch

    from bayesflow.stages.context import holds_gpu

    worker = pytest.importorskip("ray._private.worker", reason="Ray is the optional extra")
    context = types.SimpleNamespace(worker=types.SimpleNamespace(mode=worker.WORKER_MODE))
    fake = types.SimpleNamespace(is_initialized=lambda: True, get_runtime_context=lambda: context,
                                 get_gpu_ids=lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert ("cuda" if holds_gpu() else "cpu") == expected
    context.worker.mode = worker.SCRIPT_MODE  # the driver, or a script: any visible GPU
    assert holds_gpu()


@pytest.mark.slow
def test_a_task_holds_the_resources_its_method_or_kind_asks_for(tmp_path: Path) -> None:
    """On a local Ray with a custom resource: a method's entry wins over its kind's, and
    each task holds what its entry names (the plumbing a GPU entry goes through)."""
    ray = pytest.importorskip("ray", reason="Ray is the optional extra bayesflow-workflows[ray]")
    from bayesflow.dag.cluster import RayExecutor

    ray.init(num_cpus=2, resources={"special": 1}, include_dashboard=False, log_to_driver=False)
    try:
        executor = RayExecutor(Copier(), resources={"wide": {"num_cpus": 2}, "fit": {"special": 1}}, workers=2)
        stages = [Stage("fit/wide", "fit", (), "kw", method="wide"), Stage("fit/other", "fit", (), "ko", method="x"),
                  Stage("evaluate/x", "evaluate", (), "ke", method="x")]
        for stage in stages:
            (tmp_path / stage.key).mkdir()
            executor.submit(stage, {}, tmp_path / stage.key).result(timeout=300)
        held = {name: where["resources"] for name, where in executor.placements.items()}
        assert held == {"fit/wide": {"CPU": 2.0}, "fit/other": {"CPU": 1.0, "special": 1.0},
                        "evaluate/x": {"CPU": 1.0}}
    finally:
        ray.shutdown()
