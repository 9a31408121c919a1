"""Executing a plan: caching, keep-going on failure, atomic outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.execute import execute
from bayesflow.dag.plan import Plan, Stage


def chain_plan() -> Plan:
    """a → b, and c independent; plus a non-cacheable report that needs b and c."""
    stages = {
        "fit/a": Stage("fit/a", "fit", (), "ka"),
        "evaluate/b": Stage("evaluate/b", "evaluate", ("fit/a",), "kb"),
        "fit/c": Stage("fit/c", "fit", (), "kc"),
        "report": Stage("report", "report", ("evaluate/b", "fit/c"), "kr"),
    }
    return Plan("test", stages)


class Recorder:
    """A run_stage that records calls and can be told to fail."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.failing = failing or set()

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        self.calls.append(stage.name)
        if stage.name in self.failing:
            raise FloatingPointError(f"{stage.name} diverged")
        (staging / "out.txt").write_text(stage.name)
        return {"inputs": sorted(inputs)}


def test_rerun_is_a_no_op(tmp_path: Path) -> None:
    """A second execution reuses every cacheable stage."""
    cache = Cache(tmp_path)
    first = Recorder()
    execute(chain_plan(), first, cache)
    second = Recorder()
    outcome = execute(chain_plan(), second, cache)
    assert first.calls == ["fit/a", "fit/c", "evaluate/b", "report"] or len(first.calls) == 4
    assert second.calls == ["report"]
    assert outcome.status["fit/a"] == "cached" and outcome.ok


def test_failure_fails_only_its_dependents(tmp_path: Path) -> None:
    """A failing stage skips what needs it; independent stages still run."""
    outcome = execute(chain_plan(), Recorder({"fit/a"}), Cache(tmp_path))
    assert outcome.status == {
        "fit/a": "failed", "evaluate/b": "skipped", "fit/c": "ran", "report": "skipped"
    } or (outcome.status["fit/a"], outcome.status["fit/c"]) == ("failed", "ran")
    assert outcome.status["evaluate/b"] == "skipped" and outcome.status["report"] == "skipped"
    assert "fit/a diverged" in outcome.errors["fit/a"]
    assert not outcome.ok


def test_failed_stage_leaves_no_output(tmp_path: Path) -> None:
    """Nothing of a failed stage is visible in the cache, so the next run retries it."""
    cache = Cache(tmp_path)
    execute(chain_plan(), Recorder({"fit/a"}), cache)
    assert cache.get("ka") is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]
    retry = Recorder()
    execute(chain_plan(), retry, cache)
    assert "fit/a" in retry.calls and "fit/c" not in retry.calls


def test_force_pattern_reruns_matching_stages_and_their_dependents(tmp_path: Path) -> None:
    """--force with a glob reruns only the stages it matches."""
    cache = Cache(tmp_path)
    execute(chain_plan(), Recorder(), cache)
    again = Recorder()
    execute(chain_plan(), again, cache, force=["fit/*"])
    assert sorted(again.calls) == ["evaluate/b", "fit/a", "fit/c", "report"]


def test_interrupt_discards_staging(tmp_path: Path) -> None:
    """Ctrl-C inside a stage leaves no partial output and tells the hooks."""
    told: list[Any] = []

    class Hook:
        def before_stage(self, stage: Stage) -> None: ...
        def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None: ...
        def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None: ...
        def on_interrupt(self, stage: Stage | None) -> None:
            told.append(stage.name if stage else None)

    def interrupted(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        (staging / "half.txt").write_text("half")
        raise KeyboardInterrupt

    cache = Cache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        execute(chain_plan(), interrupted, cache, [Hook()])
    assert told and told[0] in ("fit/a", "fit/c")
    assert list(tmp_path.iterdir()) == []


def test_cache_commit_is_atomic(tmp_path: Path) -> None:
    """An entry is visible only after commit, with its files and values."""
    cache = Cache(tmp_path)
    staging = cache.staging("k1")
    (staging / "posterior.npz").write_bytes(b"x")
    assert cache.get("k1") is None
    entry = cache.commit("k1", staging, {"steps": 3})
    assert cache.get("k1") == entry and entry.file("posterior.npz").read_bytes() == b"x"


def test_process_workers_give_the_same_outcome(tmp_path: Path) -> None:
    """Two worker processes run the plan with the same statuses as one by one."""
    from bayesflow.dag.schedule import ProcessBackend

    failing = Recorder({"fit/a"})
    outcome = execute(chain_plan(), failing, Cache(tmp_path), backend=ProcessBackend(failing, 2))
    assert outcome.status == {
        "fit/a": "failed", "fit/c": "ran", "evaluate/b": "skipped", "report": "skipped"
    }
    assert Cache(tmp_path).get("kc").file("out.txt").read_text() == "fit/c"
    again = execute(chain_plan(), Recorder(), Cache(tmp_path), backend=ProcessBackend(Recorder(), 2))
    assert again.status == {"fit/a": "ran", "fit/c": "cached", "evaluate/b": "ran", "report": "ran"}
