"""The cache: damaged entries, records and indexes are missing (with a warning naming
them) and recomputed; staging folders of live processes are never cleaned away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bayesflow.dag.cache import MANIFEST, OUTPUTS, Cache, CacheWarning, Entry, _host_tag
from bayesflow.dag.plan import Plan, Stage
from bayesflow.dag.scheduler import execute
from tests.data.tables import good_rows, write_table


def finished(cache: Cache, key: str = "k1", files: dict[str, bytes] | None = None) -> Entry:
    """Commit an entry of ``key`` with ``files`` (default: one ``posterior.npz``)."""
    staging = cache.staging(key)
    for name, content in (files or {"posterior.npz": b"12345"}).items():
        (staging / name).write_bytes(content)
    return cache.commit(key, staging, {"steps": 3})


def missing_with_warning(cache: Cache, key: str, expected: str) -> None:
    """``cache.get(key)`` is None and warns exactly ``expected``."""
    with pytest.warns(CacheWarning) as caught:
        assert cache.get(key) is None
    assert [str(warning.message) for warning in caught] == [expected]


# ---------------------------------------------------------------------------- entries


def test_a_committed_entry_lists_its_files_with_their_sizes(tmp_path: Path) -> None:
    """commit writes a manifest of every file the stage wrote; get returns the entry."""
    cache = Cache(tmp_path)
    entry = finished(cache, files={"posterior.npz": b"12345", "extra.txt": b"x"})
    assert json.loads(entry.file(MANIFEST).read_text()) == {"extra.txt": 1, "posterior.npz": 5}
    assert cache.get("k1") == entry


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda folder: (folder / OUTPUTS).write_text('{"steps": 3, "lo'), f"{OUTPUTS} is not valid JSON (cut short?)"),
        (lambda folder: (folder / OUTPUTS).write_text("[1, 2]"), f"{OUTPUTS} holds list, not a mapping"),
        (lambda folder: (folder / OUTPUTS).write_bytes(b"\xff\xfe"), f"{OUTPUTS} cannot be read"),
        (lambda folder: (folder / OUTPUTS).unlink(), f"{OUTPUTS} is missing"),
        (lambda folder: (folder / "posterior.npz").unlink(), "posterior.npz is missing"),
        (lambda folder: (folder / "posterior.npz").write_bytes(b"12"), "posterior.npz has 2 bytes, 5 were written"),
        (lambda folder: (folder / MANIFEST).write_text("{"), f"{MANIFEST} is not valid JSON (cut short?)"),
    ],
    ids=["truncated", "not-a-mapping", "not-utf8", "no-outputs", "file-missing", "file-truncated", "bad-manifest"],
)
def test_a_damaged_entry_is_missing_and_named(tmp_path: Path, damage: Any, problem: str) -> None:
    """Every way an entry can be damaged makes it missing, with a warning naming the path."""
    cache = Cache(tmp_path)
    folder = finished(cache).folder
    damage(folder)
    with pytest.warns(CacheWarning) as caught:
        assert cache.get("k1") is None
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 1 and str(folder) in messages[0] and problem in messages[0]
    assert messages[0].endswith("the stage will be recomputed")


def test_the_exact_warning_of_a_truncated_outputs_file(tmp_path: Path) -> None:
    """The whole message: the path, what is wrong, what happens next."""
    cache = Cache(tmp_path)
    folder = finished(cache).folder
    (folder / OUTPUTS).write_text('{"ste')
    missing_with_warning(
        cache, "k1", f"{folder / OUTPUTS} is not valid JSON (cut short?); the stage will be recomputed"
    )


def test_an_entry_written_before_manifests_is_still_used(tmp_path: Path) -> None:
    """Entries of earlier versions (no manifest) are taken as they are, without warning."""
    cache = Cache(tmp_path)
    folder = finished(cache).folder
    (folder / MANIFEST).unlink()
    assert cache.get("k1") is not None


def test_a_damaged_entry_is_replaced_by_the_next_commit(tmp_path: Path) -> None:
    """Committing the key again replaces the damaged folder."""
    cache = Cache(tmp_path)
    (finished(cache).folder / OUTPUTS).write_text("{")
    with pytest.warns(CacheWarning):
        assert cache.get("k1") is None
    entry = finished(cache, files={"posterior.npz": b"new"})
    assert cache.get("k1") == entry and entry.file("posterior.npz").read_bytes() == b"new"


def test_execute_recomputes_a_stage_whose_outputs_are_truncated(tmp_path: Path) -> None:
    """The scheduler sees a damaged entry as missing and runs the stage again."""
    plan = Plan("one", {"fit/a": Stage("fit/a", "fit", (), "ka")})
    calls: list[str] = []

    def run_stage(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        calls.append(stage.name)
        (staging / "out.txt").write_text("a")
        return {"n": len(calls)}

    cache = Cache(tmp_path)
    execute(plan, run_stage, cache)
    (tmp_path / "ka" / OUTPUTS).write_text('{"n": ')
    with pytest.warns(CacheWarning, match="is not valid JSON"):
        outcome = execute(plan, run_stage, cache)
    assert calls == ["fit/a", "fit/a"] and outcome.status == {"fit/a": "ran"}
    assert cache.get("ka").values == {"n": 2}  # type: ignore[union-attr]


# ------------------------------------------------------------------ records and index


@pytest.mark.parametrize(
    ("text", "problem"),
    [('{"run_id": ', "is not valid JSON (cut short?)"), ('"abc"', "holds str, not a mapping")],
    ids=["truncated", "not-a-mapping"],
)
def test_a_bad_side_record_is_ignored_with_a_warning(tmp_path: Path, text: str, problem: str) -> None:
    """A side record that cannot be read is None (it will be written again)."""
    cache = Cache(tmp_path)
    path = tmp_path / "k1.mlflow.json"
    path.write_text(text)
    with pytest.warns(CacheWarning) as caught:
        assert cache.record("k1", "mlflow") is None
    assert [str(w.message) for w in caught] == [f"{path} {problem}; it is ignored and will be written again"]


def test_a_bad_index_knows_nothing_and_says_so(tmp_path: Path) -> None:
    """A truncated index is empty, with a warning; stale stages then show as new."""
    cache = Cache(tmp_path)
    path = tmp_path / "index" / "w.json"
    path.parent.mkdir()
    path.write_text('{"fit/a": {"key"')
    with pytest.warns(CacheWarning) as caught:
        assert cache.index("w") == {}
    assert [str(w.message) for w in caught] == [
        f"{path} is not valid JSON (cut short?); stale stages will show as new"
    ]


def test_index_entries_of_the_wrong_shape_are_dropped(tmp_path: Path) -> None:
    """Entries that are not ``{key, config}`` mappings are left out; the rest are kept."""
    cache = Cache(tmp_path)
    cache.write_index("w", {"fit/a": {"key": "ka", "config": {}}, "fit/b": 5, "fit/c": {"config": {}}})  # type: ignore[dict-item]
    with pytest.warns(CacheWarning, match="2 entries are not"):
        assert cache.index("w") == {"fit/a": {"key": "ka", "config": {}}}


# -------------------------------------------------------------------------- staging


def test_staging_folders_name_their_process(tmp_path: Path) -> None:
    """A staging folder carries this process's pid and host tag."""
    staging = Cache(tmp_path).staging("k1")
    assert staging.name.startswith(f".staging-{os.getpid()}-{_host_tag()}-k1-")


def test_cleaning_keeps_the_staging_of_live_processes(tmp_path: Path) -> None:
    """Only folders of dead processes (and of versions that named no process) go."""
    cache = Cache(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = _host_tag()
    kept = [cache.staging("k1"), tmp_path / f".staging-{os.getppid()}-{host}-k2-x",
            tmp_path / f".staging-{dead.stdout.strip()}-0000abcd-k3-x"]  # another host's
    gone = [tmp_path / f".staging-{dead.stdout.strip()}-{host}-k4-x", tmp_path / ".staging-k5-x",
            tmp_path / f".trash-{dead.stdout.strip()}-{host}-k6-x"]
    for folder in kept + gone:
        folder.mkdir(exist_ok=True)
    assert cache.clean_staging() == len(gone)
    assert all(folder.is_dir() for folder in kept) and not any(folder.exists() for folder in gone)


# ---------------------------------------------------------- through the command line


@pytest.mark.e2e
def test_a_truncated_outputs_file_is_recomputed_by_the_next_run(tmp_path: Path) -> None:
    """`bayesflow run` after a truncated outputs.json: exit 0, a warning naming the file,
    the fit recomputed and its evaluation with it."""
    write_table(tmp_path, good_rows())
    command = [sys.executable, "-m", "bayesflow.cli", "run", "spec.yaml"]
    environment = {**os.environ, "COLUMNS": "200"}
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=environment, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    cache = tmp_path / ".bayesflow" / "cache"
    fit = next(path for path in cache.glob("*/posterior.npz")).parent
    (fit / OUTPUTS).write_text((fit / OUTPUTS).read_text()[:10])
    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=environment, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (f"CacheWarning: .bayesflow/cache/{fit.name}/{OUTPUTS} is not valid JSON (cut short?); "
            "the stage will be recomputed") in second.stderr
    assert "stages: 2 ran, 0 cached, 0 failed, 0 skipped" in second.stdout
    assert json.loads((fit / OUTPUTS).read_text())
