"""The scheduler and its executors: caching, keep-going, equal keys, atomic outputs."""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.executors import (
    Executor,
    InlineExecutor,
    ProcessExecutor,
    make_executor,
)
from bayesflow.dag.plan import Plan, Stage
from bayesflow.dag.scheduler import Outcome, execute
from bayesflow.errors import MissingDependencyError
from bayesflow.spec.settings import ExecutionSpec
from tests.waiting import HANG_SECONDS


def chain_plan() -> Plan:
    """a → b, and c independent; plus a non-cacheable stage (of no planned kind) named
    report that needs b and c."""
    stages = {
        "fit/a": Stage("fit/a", "fit", (), "ka"),
        "evaluate/b": Stage("evaluate/b", "evaluate", ("fit/a",), "kb"),
        "fit/c": Stage("fit/c", "fit", (), "kc"),
        "report": Stage("report", "summary", ("evaluate/b", "fit/c"), "kr"),
    }
    return Plan("test", stages)


def twin_plan() -> Plan:
    """Two methods with equal settings: their fits and evaluations share keys."""
    stages = {
        "fit/a1": Stage("fit/a1", "fit", (), "kf"),
        "fit/a2": Stage("fit/a2", "fit", (), "kf"),
        "evaluate/a1": Stage("evaluate/a1", "evaluate", ("fit/a1",), "ke"),
        "evaluate/a2": Stage("evaluate/a2", "evaluate", ("fit/a2",), "ke"),
        "report": Stage("report", "summary", ("evaluate/a1", "evaluate/a2"), "kr"),
    }
    return Plan("twins", stages)


class Recorder:
    """A run_stage that records calls (in memory and, across processes, in ``log``) and
    can be told to fail or to take a while."""

    def __init__(self, failing: set[str] | None = None, log: Path | None = None, pause: float = 0.0) -> None:
        self.calls: list[str] = []
        self.failing = failing or set()
        self.log, self.pause = log, pause

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        self.calls.append(stage.name)
        if self.log is not None:
            with self.log.open("a") as stream:
                stream.write(stage.name + "\n")
        time.sleep(self.pause)
        if stage.name in self.failing:
            raise FloatingPointError(f"{stage.name} diverged\nat step 3: loss is nan")
        (staging / "out.txt").write_text(stage.name)
        return {"inputs": sorted(inputs), "pid": os.getpid()}


class Told:
    """A hook that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []
        self.details: dict[str, str] = {}

    def before_stage(self, stage: Stage) -> None:
        self.events.append(("before", stage.name))

    def after_stage(self, stage: Stage, entry: Entry, cached: bool) -> None:
        self.events.append(("cached" if cached else "ran", stage.name))

    def on_failure(self, stage: Stage, error: BaseException, detail: str) -> None:
        self.events.append(("failed", stage.name))
        self.details[stage.name] = detail

    def on_interrupt(self, stage: Stage | None) -> None:
        self.events.append(("interrupt", stage.name if stage else None))


class ThreadExecutor:
    """A concurrent executor in threads that, like processes, refuses uncacheable stages;
    it records what it was sent and how many stages were in flight at most."""

    accepts_uncacheable = False

    def __init__(self, run_stage: Any, workers: int = 2) -> None:
        self.run_stage, self.workers = run_stage, workers
        self.pool = ThreadPoolExecutor(workers)
        self.sent: list[str] = []
        self.active = self.most = 0
        self.lock = threading.Lock()

    def _run(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            return self.run_stage(stage, inputs, staging)
        finally:
            with self.lock:
                self.active -= 1

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        self.sent.append(stage.name)
        return self.pool.submit(self._run, stage, inputs, staging)

    def shutdown(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


def test_rerun_is_a_no_op(tmp_path: Path) -> None:
    """A second execution reuses every cacheable stage."""
    cache = Cache(tmp_path)
    first = Recorder()
    execute(chain_plan(), first, cache)
    second = Recorder()
    outcome = execute(chain_plan(), second, cache)
    assert first.calls == [stage.name for stage in chain_plan().order()]
    assert second.calls == ["report"]
    assert outcome.status["fit/a"] == "cached" and outcome.ok


def test_failure_fails_only_its_dependents(tmp_path: Path) -> None:
    """A failing stage skips what needs it, saying what it needs; independent stages run."""
    outcome = execute(chain_plan(), Recorder({"fit/a"}), Cache(tmp_path))
    assert outcome.status == {
        "fit/a": "failed", "evaluate/b": "skipped", "fit/c": "ran", "report": "skipped"
    }
    assert outcome.errors["evaluate/b"] == "needs fit/a"
    assert outcome.errors["report"] == "needs evaluate/b"
    assert not outcome.ok


def test_optional_inputs_run_on_what_finished(tmp_path: Path) -> None:
    """A stage with optional inputs runs on those that finished, told which did not and
    why, under a key of its own that a complete rerun does not reuse."""
    stages = {
        "fit/a": Stage("fit/a", "fit", (), "ka"),
        "fit/c": Stage("fit/c", "fit", (), "kc"),
        "plot/x": Stage("plot/x", "plot", ("fit/a", "fit/c"), "kp", optional_inputs=True),
    }
    seen: dict[str, Any] = {}

    def run_stage(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        if stage.name == "fit/a" and "fails" not in seen:
            raise RuntimeError("boom")
        seen[stage.name] = (sorted(inputs), stage.config.get("missing"), stage.key)
        return {}

    cache = Cache(tmp_path)
    outcome = execute(Plan("t", stages), run_stage, cache)
    assert outcome.status == {"fit/a": "failed", "fit/c": "ran", "plot/x": "ran"}
    inputs, missing, key = seen.pop("plot/x")
    assert inputs == ["fit/c"] and missing == {"fit/a": {"status": "failed", "error": "boom"}}
    assert key != "kp" and cache.get(key) is not None and cache.get("kp") is None
    seen["fails"] = False
    again = execute(Plan("t", stages), run_stage, cache)
    assert again.status["plot/x"] == "ran" and seen["plot/x"] == (["fit/a", "fit/c"], None, "kp")


def test_failure_keeps_the_whole_message_and_the_traceback(tmp_path: Path) -> None:
    """The outcome holds every line of the error; hooks get the traceback."""
    told = Told()
    outcome = execute(chain_plan(), Recorder({"fit/a"}), Cache(tmp_path), [told])
    assert outcome.errors["fit/a"] == "fit/a diverged\nat step 3: loss is nan"
    assert "Traceback" in told.details["fit/a"] and "FloatingPointError" in told.details["fit/a"]


def test_without_keep_going_the_rest_is_skipped(tmp_path: Path) -> None:
    """keep_going=False skips every stage after the first failure."""
    outcome = execute(chain_plan(), Recorder({"fit/a"}), Cache(tmp_path), keep_going=False)
    assert outcome.status["fit/c"] == "skipped"
    assert outcome.errors["fit/c"] == "an earlier stage failed"


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
    """--force with a glob reruns the stages it matches and those that read them."""
    cache = Cache(tmp_path)
    execute(chain_plan(), Recorder(), cache)
    again = Recorder()
    execute(chain_plan(), again, cache, force=["fit/a"])
    assert sorted(again.calls) == ["evaluate/b", "fit/a", "report"]


def test_interrupt_discards_staging(tmp_path: Path) -> None:
    """Ctrl-C inside a stage leaves no partial output and tells the hooks which stage."""
    told = Told()

    def interrupted(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        (staging / "half.txt").write_text("half")
        raise KeyboardInterrupt

    cache = Cache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        execute(chain_plan(), interrupted, cache, [told])
    assert told.events[-1] == ("interrupt", chain_plan().order()[0].name)
    assert list(tmp_path.iterdir()) == []


def test_cache_commit_is_atomic(tmp_path: Path) -> None:
    """An entry is visible only after commit, with its files and values."""
    cache = Cache(tmp_path)
    staging = cache.staging("k1")
    (staging / "posterior.npz").write_bytes(b"x")
    assert cache.get("k1") is None
    entry = cache.commit("k1", staging, {"steps": 3})
    assert cache.get("k1") == entry and entry.file("posterior.npz").read_bytes() == b"x"


@pytest.mark.slow
def test_inline_and_process_executors_give_the_same_outcome(tmp_path: Path) -> None:
    """Two worker processes give the statuses and errors of the inline executor; the
    report runs in this process, fits in the workers."""
    outcomes: dict[str, list[Outcome]] = {}
    for name in ("inline", "process"):
        cache = Cache(tmp_path / name)
        runs = []
        for failing in ({"fit/a"}, set()):
            recorder = Recorder(failing)
            executor = ProcessExecutor(recorder, 2) if name == "process" else InlineExecutor(recorder)
            runs.append(execute(chain_plan(), recorder, cache, executor=executor))
        outcomes[name] = runs
    for inline, process in zip(outcomes["inline"], outcomes["process"]):
        assert process.status == inline.status
        assert process.errors == inline.errors
    assert outcomes["process"][1].status == {
        "fit/a": "ran", "fit/c": "cached", "evaluate/b": "ran", "report": "ran"
    }
    last = outcomes["process"][1]
    assert last.entries["report"].values["pid"] == os.getpid()
    assert last.entries["fit/a"].values["pid"] != os.getpid()
    assert Cache(tmp_path / "process").get("kc").file("out.txt").read_text() == "fit/c"


@pytest.mark.parametrize(
    "kind", ["inline", "threads", pytest.param("process", marks=pytest.mark.slow)]
)
def test_equal_keys_are_computed_once(tmp_path: Path, kind: str) -> None:
    """Stages with equal keys are computed once, the other waits and reuses it, also forced."""
    log = tmp_path / "calls.log"
    recorder = Recorder(log=log, pause=0.2)

    def executor() -> Executor:
        if kind == "process":
            return ProcessExecutor(recorder, 2)
        return ThreadExecutor(recorder) if kind == "threads" else InlineExecutor(recorder)

    cache = Cache(tmp_path / "cache")
    for force in (False, True):
        log.unlink(missing_ok=True)
        outcome = execute(twin_plan(), recorder, cache, executor=executor(), force=force)
        calls = log.read_text().split()
        assert sorted(name.split("/")[0] for name in calls) == ["evaluate", "fit", "report"]
        assert sorted(outcome.status[name] for name in ("fit/a1", "fit/a2")) == ["cached", "ran"]
        assert sorted(outcome.status[n] for n in ("evaluate/a1", "evaluate/a2")) == ["cached", "ran"]
        assert outcome.entries["fit/a1"] == outcome.entries["fit/a2"] and outcome.ok
        # the summary can tell those apart from outputs of an earlier run
        cached = {name for name, status in outcome.status.items() if status == "cached"}
        assert outcome.shared == cached and len(cached) == 2


def test_equal_key_of_a_failed_stage_fails_without_computing(tmp_path: Path) -> None:
    """When a stage fails, a stage with its key fails with the same error, uncomputed."""
    log = tmp_path / "calls.log"
    told = Told()
    outcome = execute(twin_plan(), Recorder({"fit/a1", "fit/a2"}, log), Cache(tmp_path / "c"), [told])
    assert log.read_text().split() == ["fit/a1"]
    assert outcome.status["fit/a2"] == "failed"
    assert outcome.errors["fit/a2"] == outcome.errors["fit/a1"]
    assert ("failed", "fit/a2") in told.events


def test_uncacheable_stages_wait_for_idle_workers_in_this_process(tmp_path: Path) -> None:
    """A concurrent executor never gets the report, and never more stages than workers."""
    recorder = Recorder(pause=0.05)
    executor = ThreadExecutor(recorder, workers=2)
    told = Told()
    outcome = execute(chain_plan(), recorder, Cache(tmp_path), [told], executor=executor)
    assert outcome.ok and "report" not in executor.sent
    assert sorted(executor.sent) == ["evaluate/b", "fit/a", "fit/c"]
    assert executor.most <= 2
    finished = [event for event in told.events if event[0] == "ran"]
    assert finished[-1] == ("ran", "report") and told.events[-2] == ("before", "report")


def _protocol_executor(kind: str, recorder: Recorder) -> Executor:
    """An executor of ``kind`` (Ray on a local two-CPU instance)."""
    if kind == "ray":
        pytest.importorskip("ray", reason="Ray is the optional extra bayesflow-workflows[ray]")
        from bayesflow.dag.cluster import RayExecutor

        return RayExecutor(recorder, workers=2)
    return ProcessExecutor(recorder, 2) if kind == "process" else InlineExecutor(recorder)


@pytest.mark.parametrize(
    "kind",
    ["inline", pytest.param("process", marks=pytest.mark.slow), pytest.param("ray", marks=pytest.mark.slow)],
)
def test_executors_satisfy_the_protocol(tmp_path: Path, kind: str) -> None:
    """Every executor is an Executor whose futures hold a stage's values or its error."""
    executor = _protocol_executor(kind, Recorder({"fit/bad"}))
    try:
        assert isinstance(executor, Executor)
        assert executor.accepts_uncacheable is (kind == "inline")
        assert executor.workers == (1 if kind == "inline" else 2)
        (tmp_path / "good").mkdir()
        (tmp_path / "bad").mkdir()
        good = executor.submit(Stage("fit/good", "fit", (), "kg"), {}, tmp_path / "good")
        bad = executor.submit(Stage("fit/bad", "fit", (), "kb"), {}, tmp_path / "bad")
        assert isinstance(good, Future) and good.result(timeout=HANG_SECONDS)["inputs"] == []
        assert "fit/bad diverged" in str(bad.exception(timeout=HANG_SECONDS))
        if kind == "ray":  # said plainly: the cause's type first, the node, no colour codes
            text = str(bad.exception())
            assert text.startswith("FloatingPointError: fit/bad diverged (on node ") and "\x1b" not in text
        assert (tmp_path / "good" / "out.txt").read_text() == "fit/good"
    finally:
        executor.shutdown()


def test_make_executor_follows_the_execution_section(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker is inline, more are processes, and Ray without Ray names the extra."""
    recorder = Recorder()
    assert isinstance(make_executor(ExecutionSpec(), recorder), InlineExecutor)
    processes = make_executor(ExecutionSpec(workers=2), recorder)
    try:
        assert isinstance(processes, ProcessExecutor) and processes.workers == 2
    finally:
        processes.shutdown()
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"bayesflow-workflows\[ray\]"):
        make_executor(ExecutionSpec(executor="ray"), recorder)


def test_kinds_an_executor_leaves_to_the_driver_run_in_this_process(tmp_path: Path) -> None:
    """An executor's ``driver_kinds`` (Ray: the report) are computed inline here, cached as
    any stage, and its ``placements`` reach the outcome."""
    recorder = Recorder()
    executor = ThreadExecutor(recorder, workers=2)
    executor.driver_kinds = frozenset({"evaluate"})  # type: ignore[attr-defined]
    executor.placements = {"fit/a": {"node": "n1"}}  # type: ignore[attr-defined]
    outcome = execute(chain_plan(), recorder, Cache(tmp_path), executor=executor)
    assert outcome.ok and sorted(executor.sent) == ["fit/a", "fit/c"]
    assert Cache(tmp_path).get("kb") is not None
    assert outcome.placements == {"fit/a": {"node": "n1"}}
