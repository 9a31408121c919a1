"""A full disk: simulated (the writes of the cache (staging, commit, rename, index), of a
stage's files and of MLflow's artifacts raise ``OSError(ENOSPC)``), and real (the cache or
the MLflow store on a small tmpfs that is filled up; root only, skipped elsewhere).

Whatever write fails, the run ends with exit code 1 and a message that names the disk
or the store and what to free (no traceback, no "internal error", no SQL), the cache holds
no half-written entry, and a rerun once space is freed finishes every stage, each fit with
exactly one finished MLflow run.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bayesflow.dag.cache as cache_module
from bayesflow.tracking import preflight
from tests.chaos.helpers import (
    SPEC,
    empty_store,
    entries,
    finished_once,
    fit_runs,
    invoke,
    leftovers,
    workflow,
)
from tests.chaos.mounts import fill, tmpfs


def full(*args: Any, **options: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_staging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "tempfile", SimpleNamespace(mkdtemp=full, mkstemp=tempfile.mkstemp))


def fill_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cache_module.write_json_atomic

    def write(path: Path, payload: Any) -> None:
        if path.name == cache_module.OUTPUTS:  # the manifest is written, then the disk fills
            full()
        real(path, payload)

    monkeypatch.setattr(cache_module, "write_json_atomic", write)


def fill_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "os", SimpleNamespace(**{**vars(os), "replace": full}))


def full_file(path: Any, *args: Any, **options: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def fill_stage_files(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setattr(np, "savez", full_file)
    monkeypatch.setattr(np, "savez_compressed", full_file)


def fill_artifacts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Posteriors cannot be logged (the spec, logged at the start, still can); the patch
    is in this process, so the MLflow calls are made from a thread here, not a process."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("BAYESFLOW_TRACKING_WORKER", "thread")

    real = MlflowClient.log_artifact

    def log_artifact(self: Any, run_id: str, local_path: str, *args: Any, **options: Any) -> None:
        if local_path.endswith(".npz"):
            full_file(local_path)
        real(self, run_id, local_path, *args, **options)

    monkeypatch.setattr(MlflowClient, "log_artifact", log_artifact)


DISK = "no space left on the disk that holds the cache .bayesflow/cache"
WRITES = {
    "staging": (fill_staging, f"{DISK} (writing a staging folder for stage"),
    "commit": (fill_commit, f"{DISK} (writing the entry of stage"),
    "rename": (fill_rename, f"{DISK} (writing the entry of stage"),
    "stage files": (fill_stage_files, f"{DISK} (writing the files of stage"),
    "artifacts": (fill_artifacts, "posterior.npz' of run "),
}


@pytest.mark.slow
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_full_disk_is_named_and_a_rerun_finishes(
    write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow(tmp_path)
    fill, message = WRITES[write]
    with monkeypatch.context() as patched:
        fill(patched)
        result = invoke(tmp_path, "run", "spec.yaml")
    assert result.exit_code == 1, result.output
    assert message in result.output and "No space left on device" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert leftovers(tmp_path) == []
    before = len(entries(tmp_path))

    again = invoke(tmp_path, "run", "spec.yaml")  # space freed
    assert again.exit_code == 0, again.output
    assert "0 failed" in again.output
    if write == "artifacts":
        # MLflow is written on a worker thread (tracking/background.py): the stages after
        # the failed upload may finish before its error stops the run, and are kept.
        assert len(entries(tmp_path)) == 4 >= before
    else:
        assert len(entries(tmp_path)) == 4 > before
    runs = fit_runs(tmp_path)
    assert len(runs) == 2 and all(statuses.count("FINISHED") == 1 for statuses in runs.values()), runs
    assert finished_once(runs, 2), runs


@pytest.mark.slow  # two runs of the tiny workflow
def test_a_real_full_disk_under_the_cache_says_what_to_free(tmp_path: Path) -> None:
    """The cache on a full tmpfs: every fit fails naming the disk, the cache's size and
    how to empty it; nothing half-written stays; freeing the disk lets a rerun finish."""
    workflow(tmp_path)
    with tmpfs(tmp_path / ".bayesflow"):
        filler = fill(tmp_path / ".bayesflow")
        result = invoke(tmp_path, "run", "spec.yaml")
        assert result.exit_code == 1, result.output
        assert f"{DISK} (writing the files of stage" in result.output
        assert "`df -h .bayesflow/cache`" in result.output
        assert "The cache itself holds 0 kB in 0 entries (`rm -rf .bayesflow/cache`" in result.output
        assert "Traceback" not in result.output and "internal error" not in result.output
        assert entries(tmp_path) == [] and leftovers(tmp_path) == []

        filler.unlink()
        again = invoke(tmp_path, "run", "spec.yaml")
        assert again.exit_code == 0, again.output
        assert "stages: 4 ran, 0 cached, 0 failed" in again.output
        assert len(entries(tmp_path)) == 4 and leftovers(tmp_path) == []
        assert finished_once(fit_runs(tmp_path), 2)


STORE_SPEC = SPEC.replace("report:", "tracking:\n  uri: sqlite:///store/mlflow.db\nreport:")


@pytest.mark.slow  # two runs of the tiny workflow
@pytest.mark.parametrize("when", ["before the run", "during the run"])
def test_a_full_disk_under_the_store_is_named_and_a_rerun_finishes(
    when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MLflow store on a full tmpfs: found before any stage computes, or (the check
    skipped, as when the disk fills during a run) when MLflow's writes fail; the message
    names the store's folder and its size; the rerun after freeing space logs every fit."""
    workflow(tmp_path, spec=STORE_SPEC, store=False)
    store = tmp_path / "store"
    with tmpfs(store, size="4m"):
        shutil.copyfile(empty_store(), store / "mlflow.db")
        filler = fill(store)
        with monkeypatch.context() as patched:
            if when == "during the run":
                patched.setattr(preflight, "check_store", lambda uri: None)
            result = invoke(tmp_path, "run", "spec.yaml")
        assert result.exit_code == 1, result.output
        assert f"no space left on the disk that holds the tracking store {store}" in result.output
        assert f"`df -h {store}`" in result.output and " in mlflow.db and " in result.output
        for noise in ("Traceback", "internal error", "[SQL:", "sqlalche.me"):
            assert noise not in result.output, result.output
        if when == "before the run":
            assert entries(tmp_path) == []  # nothing computed that could not be logged
        assert leftovers(tmp_path) == []

        filler.unlink()
        again = invoke(tmp_path, "run", "spec.yaml")
        assert again.exit_code == 0, again.output
        assert "0 failed" in again.output and len(entries(tmp_path)) == 4
        assert finished_once(fit_runs(tmp_path, store / "mlflow.db"), 2)
