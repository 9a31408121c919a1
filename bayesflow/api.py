"""The Python API: everything the command line does, for people who live in notebooks.

    import bayesflow
    loaded = bayesflow.load("cold_posterior", ["seeds=[0]"])
    outcome = bayesflow.run(loaded)
    frame = bayesflow.results(outcome.run_id, tracking_uri=outcome.tracking_uri)

A run loads its data once and plans once: :func:`prepare` does both, and :func:`run`
and :func:`plan_table` take its :class:`Prepared` as well as a loaded spec.

A sweep is ``load`` with ``multirun=True`` (the command line's ``-m``): overrides whose
values hold top-level commas sweep their key, and the result, a
:class:`~bayesflow.spec.sweep.Sweep`, goes to ``prepare``, ``plan_table`` and ``run``
like a loaded spec::

    sweep = bayesflow.load("spec.yaml", ["prior.variance=0.1,1", "seeds=[0]"], multirun=True)
    outcome = bayesflow.run(sweep)          # one parent run, every variant's cells
    frame = outcome.results()               # with `variant` and `swept/<key>` columns The readers of
finished runs (``results``, ``histories``, ``posteriors``, ...) live in
:mod:`bayesflow.tracking.read` and are exported here unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from bayesflow.dag.cache import Cache
from bayesflow.dag.plan import Plan, Stage, plan_workflow
from bayesflow.dag.scheduler import Hook, Outcome, execute, stage_status
from bayesflow.data import Dataset
from bayesflow.data.reference import reference_digest
from bayesflow.reports import fill_report_folder, report, report_folder
from bayesflow.spec.load import LoadedSpec, load_spec
from bayesflow.spec.sweep import Sweep, load_sweep
from bayesflow.tracking.read import (
    artifacts,
    compare,
    evaluations,
    histories,
    posteriors,
    results,
    run_spec,
)
from bayesflow.variants import load_data, plan_variants, variant_runner

if TYPE_CHECKING:
    import pandas

__all__ = [
    "Prepared", "RunResult", "Sweep", "artifacts", "compare", "evaluations", "histories", "load",
    "plan", "plan_table", "posteriors", "prepare", "report", "results", "run", "run_spec",
    "tracking_opener", "tracking_uri_of",
]

Workflow = LoadedSpec | Sweep


@overload
def load(source: str | Path | dict[str, Any], overrides: Sequence[str] = ...,
         *, multirun: Literal[False] = ...) -> LoadedSpec: ...
@overload
def load(source: str | Path | dict[str, Any], overrides: Sequence[str] = ...,
         *, multirun: Literal[True]) -> Sweep: ...
@overload
def load(source: str | Path | dict[str, Any], overrides: Sequence[str] = ...,
         *, multirun: bool) -> LoadedSpec | Sweep: ...
def load(
    source: str | Path | dict[str, Any], overrides: Sequence[str] = (), *, multirun: bool = False
) -> LoadedSpec | Sweep:
    """Load and validate a spec (a YAML path or a mapping) with optional overrides.

    With ``multirun`` (the command line's ``-m``), overrides such as
    ``prior.variance=0.1,1`` sweep their key: the result is a
    :class:`~bayesflow.spec.sweep.Sweep` of every variant, each validated.

    Raises:
        SpecError: every problem, located (for a sweep, naming the variant).
    """
    if multirun:
        return load_sweep(source, list(overrides))
    return load_spec(source, list(overrides))


def code_digests(loaded: LoadedSpec) -> dict[str, str]:
    """Digests of the code plots and the report are drawn with, for their stage keys."""
    from bayesflow.report.render import source_digest

    report = loaded.spec.report
    digests = {"figures": source_digest()}
    if report.enabled:
        digests["report"] = source_digest(report.template)
    return digests


def plan(loaded: LoadedSpec | Sweep, dataset: Dataset | None = None) -> Plan:
    """Plan a loaded spec or a sweep into stages (loads the data to know its digest)."""
    if isinstance(loaded, Sweep):
        return prepare(loaded).plan
    dataset = dataset if dataset is not None else load_data(loaded)
    return plan_workflow(loaded.spec, dataset.digest, code_digests(loaded), reference_digest(dataset))


@dataclass(frozen=True)
class Prepared:
    """A workflow ready to run: its spec, its data (loaded and checked once) and its plan.

    Attributes:
        loaded: the validated spec (of a sweep, its first variant).
        dataset: the loaded data (of a sweep, the first variant's).
        plan: the plan of ``loaded`` on ``dataset`` (of a sweep, of every variant).
        sweep: the sweep, when this is one.
        datasets: of a sweep, each variant's data by its label (equal ``data`` blocks
            loaded once).
    """

    loaded: LoadedSpec
    dataset: Dataset
    plan: Plan
    sweep: Sweep | None = None
    datasets: dict[str, Dataset] = field(default_factory=dict)


def prepare(loaded: Workflow | Prepared | str | Path) -> Prepared:
    """Load and check the data of ``loaded`` and plan it, once, for :func:`run` and
    :func:`plan_table` to share (a :class:`Prepared` is returned as it is). A sweep's
    data are loaded once per distinct ``data`` block.

    Raises:
        DataError: the data cannot be used with the spec's likelihood.
    """
    if isinstance(loaded, Prepared):
        return loaded
    if isinstance(loaded, (str, Path)):  # bayesflow.run("spec.yaml"): the spec as written
        loaded = load(loaded)
    if isinstance(loaded, Sweep):
        the_plan, datasets = plan_variants(loaded, code_digests(loaded.first))
        return Prepared(loaded.first, datasets[loaded.variants[0].label], the_plan, loaded, datasets)
    dataset = load_data(loaded)
    the_plan = plan_workflow(loaded.spec, dataset.digest, code_digests(loaded), reference_digest(dataset))
    return Prepared(loaded, dataset, the_plan)


def _cache_folder(workflow: Workflow | Prepared | str | Path) -> str:
    if isinstance(workflow, Prepared):
        loaded = workflow.loaded
    elif isinstance(workflow, (str, Path)):
        loaded = load(workflow)
    else:
        loaded = workflow.first if isinstance(workflow, Sweep) else workflow
    return str(loaded.spec.execution.cache_dir)


def plan_table(workflow: Workflow | Prepared | str | Path, force: Sequence[str] | bool = False) -> list[dict[str, Any]]:
    """One row per stage: name, kind, status (new / cached / stale / forced / always), the
    reason of a stale status (what changed since the stage last finished), key, inputs,
    and of a sweep's stage its ``variant`` (the label; empty for plots and the report).

    Args:
        workflow: a loaded spec or a sweep (its data are loaded to plan it), or a
            :class:`Prepared`.
        force: True, or glob patterns of stage names a run would recompute.
    """
    from bayesflow.dag.changes import describe_change

    prepared = prepare(workflow)
    cache = Cache(prepared.loaded.spec.execution.cache_dir)
    index = cache.index(prepared.plan.workflow)
    rows = []
    for stage in prepared.plan.order():
        status = stage_status(stage, cache, force, index)
        previous = index.get(stage.name) or {}
        reason = describe_change(stage, previous.get("config") or {}) if status == "stale" else ""
        rows.append({
            "stage": stage.name, "kind": stage.kind, "status": status, "reason": reason,
            "key": stage.key, "inputs": list(stage.inputs), "variant": stage.variant,
        })
    return rows


def tracking_uri_of(loaded: Workflow) -> str:
    """The spec's tracking URI made absolute (relative SQLite paths are from the cwd)."""
    from bayesflow.tracking import resolve_tracking_uri

    loaded = loaded.first if isinstance(loaded, Sweep) else loaded
    return resolve_tracking_uri(loaded.spec.tracking.uri, Path.cwd())


@dataclass
class RunResult:
    """What one ``run`` did."""

    run_id: str
    tracking_uri: str
    experiment: str
    outcome: Outcome
    report_dir: Path
    seconds: float
    fit_runs: dict[str, str] = field(default_factory=dict)
    plan: Plan | None = None

    @property
    def exit_code(self) -> int:
        """0 when every stage finished, 1 when a stage failed (docs/design.md, "Contracts")."""
        return 0 if self.outcome.ok else 1

    @property
    def report_html(self) -> Path | None:
        """The rendered HTML report in the run's report folder, if the report stage finished."""
        if "report" not in self.outcome.entries:
            return None
        return self.report_dir / "report.html"

    def results(self) -> pandas.DataFrame:
        """The run's results table from its stages' outputs, without reading the store:
        one row per cell (see :func:`bayesflow.stages.table.results_table`)."""
        from bayesflow.stages.table import outcome_results

        if self.plan is None:
            raise ValueError("this RunResult has no plan; read the store with bayesflow.results(run_id)")
        return outcome_results(self.plan, self.outcome)


@Cache.holding_lock(_cache_folder)  # one run per cache folder
def run(
    workflow: Workflow | Prepared | str | Path,
    *,
    force: Sequence[str] | bool = False,
    keep_going: bool | None = None,
    hooks: Sequence[Hook] = (),
    tracker: Any = None,
) -> RunResult:
    """Run a workflow: plan, execute every stage with caching, track, report.

    Args:
        workflow: the validated spec, a sweep (one parent run over every variant), a
            :class:`Prepared` (its data and plan reused), or a spec's path (loaded as is).
        force: True to rerun every stage, or glob patterns of stage names to rerun.
        keep_going: keep running independent stages after a failure (default: the
            spec's ``execution.keep_going``, itself True by default for sweeps).
        hooks: extra hooks (e.g. a progress display).
        tracker: a tracker to use instead of MLflow at the spec's URI (tests).

    Raises:
        KeyboardInterrupt: Ctrl-C, or :class:`~bayesflow.stopping.Stopped` for SIGTERM or
            SIGHUP (handled so while the run goes, from the main thread, unless another
            handler is set): the finished stages logged, the runs ended KILLED.
        TrackingError: the store failed, or the tracking worker died; the runs it left
            RUNNING are ended FAILED with the message.
    """
    from bayesflow.report.kernel import prestarted
    from bayesflow.stages import StageRunner
    from bayesflow.stages.context import describe_error
    from bayesflow.stopping import stop_on_signals
    from bayesflow.tracking.background import BackgroundHook
    from bayesflow.tracking.preflight import check_store
    from bayesflow.tracking.session import end_own_runs, finish_tracking, worker_is_process

    began = time.perf_counter()
    prepared = prepare(workflow)
    loaded, the_plan = prepared.loaded, prepared.plan
    spec = loaded.spec
    if tracker is None:
        from bayesflow.tracking import MlflowTracker

        tracker = MlflowTracker(tracking_uri_of(loaded))
    experiment = spec.tracking.experiment or spec.name
    sweep = prepared.sweep
    check_store(str(getattr(tracker, "uri", "")))  # a store it cannot write: before any stage
    cache = Cache(spec.execution.cache_dir)
    # The store is opened and every MLflow call made by a worker while the stages compute
    # (tracking is a sink: tracking/background.py, tracking/session.py).
    computing = _computes(list(the_plan.stages.values()), cache, force)
    logging = BackgroundHook(tracking_opener(prepared, tracker, experiment),
                             process=worker_is_process(tracker, computing))
    runner: Any = StageRunner(loaded, prepared.dataset)
    if sweep is not None:  # each variant's stages run on its own spec and data
        runner = variant_runner(sweep, prepared.datasets)
    going = spec.execution.keep_going if keep_going is None else keep_going
    # SIGTERM and SIGHUP stop the run as Ctrl-C does (bayesflow/stopping.py; the command
    # line's own handler, when it has one, is kept).
    with stop_on_signals():
        backend = _backend(loaded, runner)
        try:
            # The report's kernel starts now, while the fits run (report/kernel.py).
            reports = [stage for stage in the_plan.stages.values() if stage.kind == "report"]
            with prestarted(_computes(reports, cache, force)):
                outcome = execute(
                    the_plan, runner, cache, [logging, *hooks], executor=backend, keep_going=going,
                    force=force,
                )
            parent_id, runs = logging.finish(finish_tracking, {
                "stages_failed": float(len(outcome.failed)),
                "stages_cached": float(sum(s == "cached" for s in outcome.status.values())),
                "wall_seconds": time.perf_counter() - began,
            }, "FINISHED" if outcome.ok else "FAILED")
        except KeyboardInterrupt as interrupt:  # Ctrl-C, or a stop signal (Stopped)
            with contextlib.suppress(Exception):  # already logged what it could; stop it
                logging.close()
            end_own_runs(tracker, experiment, "KILLED", str(interrupt) or "interrupted")
            raise
        except BaseException as error:
            # Every run this process opened (the parent, a fit whose logging failed half-way)
            # ends FAILED with why; when the store itself is what failed, the next run ends
            # them as stale.
            why = describe_error(error)
            for ending in (logging.close, lambda: end_own_runs(tracker, experiment, "FAILED", why)):
                with contextlib.suppress(Exception):  # the error being raised matters more
                    ending()
            raise
    report_dir = report_folder(spec.report.output_dir, spec.name, parent_id)
    fill_report_folder(the_plan, outcome, report_dir)
    return RunResult(
        parent_id, tracker.uri, experiment, outcome, report_dir,
        time.perf_counter() - began, runs, the_plan,
    )


def tracking_opener(prepared: Prepared, tracker: Any, experiment: str) -> Callable[[], Any]:
    """What the tracking worker calls first (it pickles to a worker process):
    :func:`~bayesflow.tracking.session.open_tracking` with this process's tags and the
    loaded data's sizes, so the worker logs a fit's model without loading the data, a
    tokenizer or torch (docs/design.md, "Tracking as a sink")."""
    from bayesflow.posterior.files import dataset_sizes
    from bayesflow.tracking.hook import process_tags
    from bayesflow.tracking.session import open_tracking

    sizes = {"": dataset_sizes(prepared.dataset)}
    sizes.update({label: dataset_sizes(data) for label, data in prepared.datasets.items()})
    return functools.partial(
        open_tracking, tracker, prepared.loaded, prepared.plan, experiment, prepared.dataset.digest,
        prepared.sweep, process_tags(), sizes,
    )


def _computes(stages: list[Stage], cache: Cache, force: Sequence[str] | bool) -> bool:
    """Whether any of ``stages`` will compute (one not cached, or forced)."""
    return bool(stages) and (bool(force) or not all(cache.holds(stage.key) for stage in stages))


def _backend(loaded: LoadedSpec, runner: Any) -> Any:
    """The executor the spec's ``execution`` section asks for (inline, processes or Ray)."""
    from bayesflow.dag.executors import make_executor

    return make_executor(loaded.spec.execution, runner)
