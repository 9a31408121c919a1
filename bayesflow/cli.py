"""The command line: ``bayesflow validate | plan | run | ui | schema`` and the registry
listings ``bayesflow engines | models | datasets | likelihoods | priors | plots``.

Exit codes (a contract other tools rely on): 0 success; 1 a stage failed; 2 usage
error; 3 the spec is invalid. Errors print as messages, never as a Python traceback
unless ``--debug`` is given. The commands hold no logic: they call :mod:`bayesflow.api`
and :mod:`bayesflow.spec.catalog`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from bayesflow.errors import BayesflowError

__all__ = ["app", "main"]

REGISTRIES = "Registries: what a spec can name"

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Declarative workflows for tempered Bayesian deep learning posteriors.",
)
console = Console(stderr=True, soft_wrap=True)
output = Console(soft_wrap=True)
# MLflow draws a progress bar for every artifact download; the summary does several.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
DEBUG = {"on": False}

SPEC_ARGUMENT = typer.Argument(..., help="The workflow YAML file.", show_default=False, metavar="SPEC")
OVERRIDES_ARGUMENT = typer.Argument(
    None,
    metavar="KEY=VALUE",
    help="Overrides such as `temperatures=[0.1,1] methods.vi.epochs=5` (`+key=value` adds a key).",
)
FORCE_OPTION = typer.Option(
    None, "--force", help="Rerun stages whose name matches this glob (repeatable; `*` for all)."
)
OUT_OPTION = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout.")


def _traceback(error: BaseException) -> None:
    console.print("".join(traceback.format_exception(error)).rstrip(), markup=False, highlight=False)


def _fail(error: BayesflowError) -> None:
    """Print ``error`` (after its traceback with ``--debug``) and exit with its code."""
    if DEBUG["on"]:
        _traceback(error)
    console.print("[bold red]error:[/]", end=" ")
    console.print(str(error), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(getattr(error, "exit_code", 1))


def _crash(error: Exception) -> None:
    """Report an error bayesflow did not expect: one line, or the traceback with --debug."""
    if DEBUG["on"]:
        _traceback(error)
    console.print("[bold red]internal error:[/]", end=" ")
    console.print(
        f"{type(error).__name__}: {error}. This is a bug in bayesflow: rerun with --debug "
        "for the traceback and report it.",
        markup=False, highlight=False, soft_wrap=True,
    )
    raise typer.Exit(1)


def _guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Run ``command`` so that an error reaches the user as a message, never as a
    traceback (unless ``--debug``): a bayesflow error with its exit code, anything else
    as an internal error (exit 1)."""

    @functools.wraps(command)
    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except BayesflowError as error:
            _fail(error)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as error:  # noqa: BLE001 - the last line of defence
            _crash(error)

    return guarded


def _load(spec: Path, overrides: list[str] | None) -> Any:
    from bayesflow.api import load

    return load(spec, overrides or [])


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show Python tracebacks of errors."),
) -> None:
    """Declarative workflows for tempered Bayesian deep learning posteriors."""
    DEBUG["on"] = debug


@app.command()
@_guarded
def validate(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    resolved: bool = typer.Option(False, "--resolved", help="Print the resolved spec with defaults."),
) -> None:
    """Check a spec: exit 0 when valid, 3 with every problem located."""
    loaded = _load(spec, overrides)
    if resolved:
        sys.stdout.write(loaded.to_yaml())
    else:
        output.print(f"{spec}: valid ({len(loaded.spec.methods)} methods, "
                     f"{len(loaded.spec.temperatures)} temperatures, {len(loaded.spec.seeds)} seeds)",
                     markup=False, highlight=False)


@app.command()
@_guarded
def plan(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    dag: bool = typer.Option(False, "--dag", help="Show the graph: each stage and its inputs."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Show the stages a run would execute: new, cached or stale (and why)."""
    from bayesflow.api import plan_table

    loaded = _load(spec, overrides)
    rows = plan_table(loaded)
    if as_json:
        output.print_json(json.dumps(rows))
        return
    if dag:
        output.print(_dag_text(rows), markup=False, highlight=False)
    else:
        output.print(_plan_rich_table(rows, loaded.spec.name))
    output.print(_counts_text(rows), markup=False, highlight=False)


def _plan_rich_table(rows: list[dict[str, Any]], workflow: str) -> Table:
    table = Table(title=f"plan of {workflow}")
    table.add_column("stage", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("key", no_wrap=True)
    stale = any(row["reason"] for row in rows)
    if stale:
        table.add_column("why stale")
    for row in rows:
        table.add_row(row["stage"], row["status"], row["key"], *([row["reason"]] if stale else []))
    return table


def _dag_text(rows: list[dict[str, Any]]) -> str:
    """The graph as indented text: each stage (inputs first), its inputs below it."""
    lines = []
    for row in rows:
        reason = f": {row['reason']}" if row["reason"] else ""
        lines.append(f"{row['stage']}  [{row['status']}{reason}]")
        lines += [f"    <- {name}" for name in row["inputs"]]
    return "\n".join(lines)


def _counts_text(rows: list[dict[str, Any]]) -> str:
    """Stages per kind and status: ``fit: 3 new, 2 stale`` per line, then the total."""
    by_kind: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for row in rows:
        statuses = by_kind.setdefault(row["kind"], {})
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
        totals[row["status"]] = totals.get(row["status"], 0) + 1

    def phrase(counts: dict[str, int]) -> str:
        return ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))

    lines = [f"{kind}: {phrase(counts)}" for kind, counts in by_kind.items()]
    return "\n".join([*lines, f"{len(rows)} stages: {phrase(totals)}"])


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

    def before_stage(self, stage: Any) -> None:
        self.started[stage.name] = time.perf_counter()
        self.progress.update(self.task, description=f"[cyan]{stage.name}")

    def after_stage(self, stage: Any, entry: Any, cached: bool) -> None:
        self.progress.advance(self.task)
        if not cached:
            seconds = time.perf_counter() - self.started.get(stage.name, time.perf_counter())
            self.progress.console.print(f"  [green]done[/]   {stage.name} ({seconds:.1f} s)", highlight=False)

    def on_failure(self, stage: Any, error: BaseException, detail: str) -> None:
        self.progress.advance(self.task)
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        self.progress.console.print("  [red]failed[/]", end=" ")
        self.progress.console.print(f"{stage.name}: {message}", highlight=False, markup=False, soft_wrap=True)
        if DEBUG["on"]:
            self.progress.console.print(detail, markup=False, highlight=False)

    def on_interrupt(self, stage: Any) -> None:
        self.progress.stop()


def _summary(result: Any) -> None:
    from bayesflow.api import results

    try:
        frame = results(result.run_id, tracker=None, tracking_uri=result.tracking_uri)
    except BayesflowError:
        frame = None
    if frame is not None and len(frame):
        metrics = [m for m in ("test_nll", "test_accuracy", "test_ece", "test_brier") if m in frame]
        grouped = frame.groupby(["method", "temperature"], sort=True)[metrics].mean().reset_index()
        table = Table(title="results (mean over seeds)")
        for column in ["method", "T", *metrics]:
            table.add_column(column, justify="right" if column != "method" else "left")
        for _, row in grouped.iterrows():
            temperature = "shared" if row["temperature"] == 0 else f"{row['temperature']:g}"
            values = ["—" if math.isnan(row[m]) else f"{row[m]:.4f}" for m in metrics]
            table.add_row(str(row["method"]), temperature, *values)
        output.print(table)
    outcome = result.outcome
    statuses = list(outcome.status.values())
    output.print(
        f"stages: {statuses.count('ran')} ran, {statuses.count('cached')} cached, "
        f"{statuses.count('failed')} failed, {statuses.count('skipped')} skipped "
        f"in {result.seconds:.1f} s"
    )
    for name in outcome.failed:
        output.print(f"  failed: {name}: {outcome.errors[name].splitlines()[0]}", markup=False, highlight=False)
    output.print(f"MLflow store: {result.tracking_uri}  (experiment {result.experiment!r}, run {result.run_id})")
    output.print("  browse it with: bayesflow ui")
    if result.report_html is not None:
        output.print(f"report: {result.report_html}")


@app.command()
@_guarded
def run(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    force: list[str] | None = FORCE_OPTION,
    keep_going: bool | None = typer.Option(
        None, "--keep-going/--fail-fast",
        help="Keep running independent stages after one fails (default: on, from execution.keep_going).",
    ),
) -> None:
    """Fit every method × temperature × seed, evaluate, plot and report."""
    from bayesflow.api import plan as plan_of
    from bayesflow.api import run as run_workflow
    from bayesflow.api import tracking_uri_of

    loaded = _load(spec, overrides)
    try:
        uri = tracking_uri_of(loaded)
        console.print(f"MLflow tracking URI: {uri}", highlight=False)
        total = len(plan_of(loaded).stages)
        progress = ProgressHook(total)
        with progress.progress:
            result = run_workflow(loaded, force=force or False, keep_going=keep_going, hooks=[progress])
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: finished stages are cached; rerun the same command to resume")
        raise typer.Exit(130) from None
    _summary(result)
    raise typer.Exit(result.exit_code)


@app.command()
@_guarded
def report(
    run_ids: list[str] = typer.Argument(
        ..., metavar="RUN_ID...", help="The parent run id(s) `bayesflow run` printed.",
        show_default=False,
    ),
    compare: bool = typer.Option(
        False, "--compare",
        help="Compare two or more runs of a workflow (e.g. before and after a change of "
        "prior): metrics against temperature per run and method, and their differences.",
    ),
    tracking_uri: str = typer.Option("sqlite:///mlflow.db", "--tracking-uri", help="The MLflow store."),
    output_dir: Path | None = typer.Option(None, "--output-dir", help="Folder of reports (default: the spec's)."),
) -> None:
    """Re-render a run's report from its stored results, without refitting anything;
    with --compare, render one report comparing several runs."""
    from bayesflow.api import compare as render_comparison
    from bayesflow.api import report as render

    if compare:
        if len(set(run_ids)) < 2:
            console.print("[bold red]error:[/] --compare needs two or more distinct run ids", highlight=False)
            raise typer.Exit(2)
        html = render_comparison(run_ids, tracking_uri=tracking_uri, output_dir=output_dir or "reports")
    elif len(run_ids) > 1:
        console.print(
            f"[bold red]error:[/] got {len(run_ids)} run ids; render one run's report, or add "
            "--compare to compare them", highlight=False,
        )
        raise typer.Exit(2)
    else:
        html = render(run_ids[0], tracking_uri=tracking_uri, output_dir=output_dir)
    output.print(f"report: {html}")


@app.command()
@_guarded
def ui(
    tracking_uri: str = typer.Option("sqlite:///mlflow.db", "--tracking-uri", help="The MLflow store."),
    port: int = typer.Option(5000, "--port", help="Port of the UI."),
) -> None:
    """Open the MLflow UI on the bayesflow store (`run`'s default)."""
    from bayesflow.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri, Path.cwd())
    console.print(f"MLflow UI on {uri} at http://127.0.0.1:{port}")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--port", str(port)]
    os.execv(sys.executable, command)


@app.command()
@_guarded
def schema(
    out: Path | None = OUT_OPTION,
    markdown: bool = typer.Option(
        False, "--markdown", help="Write the Markdown reference of every key (docs/spec.md) instead."
    ),
) -> None:
    """Write the spec's JSON Schema (for editors), or its Markdown reference."""
    if markdown:
        from bayesflow.spec.reference import markdown_reference

        text = markdown_reference()
    else:
        from bayesflow.spec.models import WorkflowSpec

        text = json.dumps(WorkflowSpec.model_json_schema(by_alias=True), indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        console.print(f"wrote {out}")


def _listing(kind: str, singular: str) -> None:
    """Register the command listing one registry (``bayesflow engines`` and friends)."""

    def command(
        name: str | None = typer.Argument(
            None, help=f"Show one {singular}'s keys with types and descriptions.", show_default=False
        ),
    ) -> None:
        from bayesflow.spec.catalog import entries

        found = entries(kind)
        if name is None:
            output.print(_entries_text(found, singular), markup=False, highlight=False)
            output.print(f"\n`bayesflow {kind} NAME` shows one {singular}'s keys in full.",
                         markup=False, highlight=False)
            return
        chosen = [entry for entry in found if name in entry.names]
        if not chosen:
            from bayesflow.registry import closest

            names = [each for entry in found for each in entry.names]
            hint = closest(name, names)
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            console.print(f"[bold red]error:[/] unknown {singular} {name!r}{suggestion} "
                          f"(expected one of: {', '.join(names)})", highlight=False)
            raise typer.Exit(2)
        output.print(_entry_table(chosen[0], singular))

    command.__doc__ = f"The {kind} a spec can name, with keys and defaults."
    app.command(name=kind, rich_help_panel=REGISTRIES)(_guarded(command))


def _entries_text(found: list[Any], singular: str) -> str:
    """Each entry's names, summary and ``key=default`` list, wrapped to the terminal."""
    width = max(40, output.width)
    blocks = []
    for entry in found:
        keys = ", ".join(
            f"{p.key} (required)" if p.default == "required" else f"{p.key}={p.default}"
            for p in entry.parameters
        ) or f"(no keys besides the {singular}'s name)"
        blocks.append("\n".join([
            ", ".join(entry.names),
            textwrap.fill(entry.summary, width, initial_indent="  ", subsequent_indent="  "),
            textwrap.fill(keys, width, initial_indent="  ", subsequent_indent="    ",
                          break_on_hyphens=False),
        ]))
    return "\n\n".join(blocks)


def _entry_table(entry: Any, singular: str) -> Table:
    table = Table(title=f"{singular} {', '.join(entry.names)}: {entry.summary}")
    for column in ("key", "type", "default", "description"):
        table.add_column(column)
    for parameter in entry.parameters:
        table.add_row(parameter.key, parameter.type, parameter.default, parameter.description)
    return table


for _kind, _singular in (
    ("engines", "engine"), ("models", "model"), ("datasets", "dataset"),
    ("likelihoods", "likelihood"), ("priors", "prior"),
):
    _listing(_kind, _singular)


@app.command(rich_help_panel=REGISTRIES)
@_guarded
def plots() -> None:
    """The plots a spec can list under `plots:`."""
    from bayesflow.spec.catalog import plot_entries

    table = Table(title="plots")
    table.add_column("plot")
    table.add_column("draws")
    for name, what in plot_entries():
        table.add_row(name, what)
    output.print(table)


def main() -> None:
    """Entry point of the ``bayesflow`` script (``--debug`` is accepted anywhere)."""
    arguments = sys.argv[1:]
    if "--debug" in arguments[1:] and "--" not in arguments[: arguments.index("--debug")]:
        arguments.remove("--debug")
        arguments.insert(0, "--debug")
    app(args=arguments, prog_name="bayesflow")


if __name__ == "__main__":
    main()
