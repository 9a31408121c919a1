"""``bayesflow run``: the main job, with a progress line per stage and a summary."""

from __future__ import annotations

import math
import os
import shlex
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from bayesflow.cli.app import (
    DEBUG,
    FORCE_OPTION,
    MULTIRUN_OPTION,
    OVERRIDES_ARGUMENT,
    SPEC_ARGUMENT,
    app,
    console,
    guarded,
    load,
    output,
    print_table,
)
from bayesflow.errors import BayesflowError
from bayesflow.temperature import temperature_text

__all__ = ["ProgressHook", "run"]


class ProgressHook:
    """Shows one line per stage as it starts and finishes."""

    def __init__(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        )
        self.task = self.progress.add_task("stages", total=total)
        self.started: dict[str, float] = {}
        self.total, self.finished, self.failed = total, 0, 0

    def before_stage(self, stage: Any) -> None:
        self.started[stage.name] = time.perf_counter()
        self.progress.update(self.task, description=f"[cyan]{stage.name}")

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self.finished += 1
        self.progress.advance(self.task)
        if not cached:
            seconds = time.perf_counter() - self.started.get(stage.name, time.perf_counter())
            self.progress.console.print(f"  [green]done[/]   {stage.name} ({seconds:.1f} s)", highlight=False)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self.failed += 1
        self.progress.advance(self.task)
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        self.progress.console.print("  [red]failed[/]", end=" ")
        self.progress.console.print(f"{stage.name}: {message}", highlight=False, markup=False, soft_wrap=True)
        if DEBUG["on"]:
            self.progress.console.print(detail, markup=False, highlight=False)

    def on_interrupt(self, stage: Any) -> None:
        self.progress.stop()


def _stopped_line(interrupt: KeyboardInterrupt, progress: ProgressHook | None) -> str:
    """The one line a stopped run ends with: what stopped it, what finished, what to do."""
    from bayesflow.stopping import Stopped

    how = f"stopped by {interrupt.name}" if isinstance(interrupt, Stopped) else "interrupted (Ctrl-C)"
    if progress is None:
        done = "before any stage ran"
    else:
        failed = f", {progress.failed} failed" if progress.failed else ""
        left = progress.total - progress.finished - progress.failed
        done = f"{progress.finished} of {progress.total} stages finished and logged{failed}, {left} not run"
    return f"bayesflow: {how}; {done}; rerun the same command to finish"


def _shared_clause(outcome: Any) -> str:
    """``; 2 of the cached computed earlier in this run``: stages whose key another stage of
    this run computed (not reused from an earlier run), or nothing."""
    shared = len(getattr(outcome, "shared", ()))
    return f"; {shared} of the cached computed earlier in this run (equal keys)" if shared else ""


def _ui_command(uri: str) -> str:
    """``bayesflow ui``, naming the store when it is not the one ``ui`` opens by default."""
    from bayesflow.tracking.uri import resolve_tracking_uri

    default = resolve_tracking_uri(None, Path.cwd())
    return "bayesflow ui" if uri == default else f"bayesflow ui --tracking-uri {shlex.quote(uri)}"


# The metrics the end-of-run table shows, those the run has, at most four.
SUMMARY_METRICS = ("test_nll", "test_accuracy", "test_rmse", "test_coverage_90", "test_ece", "test_brier", "ksd")


def _summary(result: Any) -> None:
    try:  # from the stages' outputs: the store is not read back
        frame = result.results()
    except (BayesflowError, ValueError):
        frame = None
    if frame is not None and len(frame):
        metrics = [m for m in SUMMARY_METRICS if m in frame][:4]
        by = ["variant"] if "variant" in frame else []
        from bayesflow.report.tables import flag_columns

        flags = flag_columns(frame)  # {metric: its flag column}
        frame = frame.assign(flagged=frame[list(flags.values())].fillna("").ne("").any(axis=1) if flags else False)
        if "temperature_shared" not in frame:  # results logged before the column: T = 0 was MAP's
            frame = frame.assign(temperature_shared=frame["temperature"] <= 0)
        grouped = frame.groupby([*by, "method", "temperature", "temperature_shared"], sort=True)
        summary = grouped[metrics].mean().join(grouped["flagged"].sum()).reset_index()
        table = Table(title="results (mean over seeds)")
        for column in [*by, "method", "T", *metrics, *(["flagged"] if flags else [])]:
            table.add_column(column, justify="right" if column not in ("method", "variant") else "left")
        for _, row in summary.iterrows():
            temperature = temperature_text(row["temperature"], bool(row["temperature_shared"]))
            values = ["—" if math.isnan(row[m]) else f"{row[m]:.4f}" for m in metrics]
            flagged = [f"⚠ {int(row['flagged'])}" if row["flagged"] else ""] if flags else []
            table.add_row(*[str(row[c]) for c in by], str(row["method"]), temperature, *values, *flagged)
        print_table(table)
        if frame["flagged"].any():
            kinds = sorted(metric for metric, column in flags.items() if frame[column].fillna("").ne("").any())
            output.print(
                f"⚠ {int(frame['flagged'].sum())} of {len(frame)} fits flagged ({', '.join(kinds)}): "
                "the report lists why, and each fit run has its bayesflow.flag.* tags",
                markup=False, highlight=False,
            )
    outcome = result.outcome
    statuses = list(outcome.status.values())
    output.print(
        f"stages: {statuses.count('ran')} ran, {statuses.count('cached')} cached, "
        f"{statuses.count('failed')} failed, {statuses.count('skipped')} skipped "
        f"in {result.seconds:.1f} s{_shared_clause(outcome)}"
    )
    for name in outcome.failed:  # the whole error: its first line alone may not say the fix
        text = outcome.errors[name].rstrip().replace("\n", "\n      ")
        output.print(f"  failed: {name}: {text}", markup=False, highlight=False)
    output.print(f"MLflow store: {result.tracking_uri}  (experiment {result.experiment!r}, run {result.run_id})")
    output.print(f"  browse it with: {_ui_command(result.tracking_uri)}", markup=False, highlight=False)
    if result.report_html is not None:
        output.print(f"report: {result.report_html}")


@app.command()
@guarded
def run(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    force: list[str] | None = FORCE_OPTION,
    multirun: bool = MULTIRUN_OPTION,
    keep_going: bool | None = typer.Option(
        None, "--keep-going/--fail-fast",
        help="Keep running independent stages after one fails (default: on, from execution.keep_going).",
    ),
    wait: float | None = typer.Option(
        None, "--wait", min=0, show_default=False,
        help="Seconds to wait for another run that holds the same cache folder "
        "(default: until it ends; 0 refuses at once, exit 1).",
    ),
) -> None:
    """Fit every method × temperature × seed, evaluate, plot and report (with -m, for
    every variant of a sweep)."""
    from bayesflow.api import prepare, tracking_uri_of
    from bayesflow.api import run as run_workflow
    from bayesflow.dag.cache import Cache
    from bayesflow.dag.lock import wait_from_environment
    from bayesflow.stopping import exit_code_of, stop_on_signals

    progress: ProgressHook | None = None
    # SIGTERM and SIGHUP (timeout, systemd, Slurm, a closed terminal) stop the run as
    # Ctrl-C does (bayesflow/stopping.py); a second one during the cleanup is ignored.
    with stop_on_signals():
        try:
            loaded = load(spec, overrides, multirun)
            folder = (loaded.first if multirun else loaded).spec.execution.cache_dir
            # --wait wins; without it BAYESFLOW_LOCK_TIMEOUT says (unset: wait until the holder ends).
            waits, timeout = wait_from_environment() if wait is None else (wait != 0, wait)
            with Cache(folder).lock(wait=waits, timeout=timeout):
                uri = tracking_uri_of(loaded)
                console.print(f"MLflow tracking URI: {uri}", highlight=False)
                from bayesflow.tracking.background import discard_prestarted, prestart

                if os.environ.get("BAYESFLOW_TRACKING_WORKER") != "thread":
                    prestart()  # the tracking worker imports mlflow while the data load
                try:
                    prepared = prepare(loaded)  # the data are loaded and the plan is made once
                    progress = ProgressHook(len(prepared.plan.stages))
                    with progress.progress:
                        result = run_workflow(
                            prepared, force=force or False, keep_going=keep_going, hooks=[progress]
                        )
                finally:
                    discard_prestarted()  # one the run did not take (it failed first)
            _summary(result)
        except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM / SIGHUP as Stopped
            console.print(_stopped_line(interrupt, progress), markup=False, highlight=False)
            raise typer.Exit(exit_code_of(interrupt)) from None
    raise typer.Exit(result.exit_code)
