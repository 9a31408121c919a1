"""The command line: ``bayesflow run | validate | plan | ui | schema | engines``.

Exit codes (a contract other tools rely on): 0 success; 1 a stage failed; 2 usage
error; 3 the spec is invalid. The commands hold no logic: they call :mod:`bayesflow.api`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from bayesflow.errors import BayesflowError, SpecError

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Declarative workflows for tempered Bayesian deep learning posteriors.",
)
console = Console(stderr=True, soft_wrap=True)
output = Console(soft_wrap=True)
# MLflow draws a progress bar for every artifact download; the summary does several.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
DEBUG = {"on": False}

SPEC_ARGUMENT = typer.Argument(..., help="The workflow YAML file.", show_default=False)
OVERRIDES_ARGUMENT = typer.Argument(
    None, help="Overrides such as `temperatures=[0.1,1] methods.vi.epochs=5` (`+key=value` adds a key)."
)


def _fail(error: BayesflowError) -> None:
    if DEBUG["on"]:
        raise error
    console.print("[bold red]error:[/]", end=" ")
    console.print(str(error), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(getattr(error, "exit_code", 1))


def _load(spec: Path, overrides: Optional[list[str]]) -> Any:
    from bayesflow.api import load

    try:
        return load(spec, overrides or [])
    except SpecError as error:
        _fail(error)


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show Python tracebacks of errors."),
) -> None:
    DEBUG["on"] = debug


@app.command()
def validate(
    spec: Path = SPEC_ARGUMENT,
    overrides: Optional[list[str]] = OVERRIDES_ARGUMENT,
    resolved: bool = typer.Option(False, "--resolved", help="Print the resolved spec with defaults."),
) -> None:
    """Check a spec; exit 0 when valid, 3 with every problem listed when not."""
    loaded = _load(spec, overrides)
    if resolved:
        output.print(loaded.to_yaml(), markup=False, highlight=False)
    else:
        output.print(f"{spec}: valid ({len(loaded.spec.methods)} methods, "
                     f"{len(loaded.spec.temperatures)} temperatures, {len(loaded.spec.seeds)} seeds)")


@app.command()
def plan(
    spec: Path = SPEC_ARGUMENT,
    overrides: Optional[list[str]] = OVERRIDES_ARGUMENT,
    dag: bool = typer.Option(False, "--dag", help="Show each stage's inputs."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Print the stages a run would execute, each marked new or cached, without running."""
    from bayesflow.api import plan_table

    loaded = _load(spec, overrides)
    try:
        rows = plan_table(loaded)
    except BayesflowError as error:
        _fail(error)
    if as_json:
        output.print_json(json.dumps(rows))
        return
    table = Table(title=f"plan of {loaded.spec.name}")
    for column in ("stage", "kind", "status", "key"):
        table.add_column(column)
    if dag:
        table.add_column("inputs")
    for row in rows:
        cells = [row["stage"], row["kind"], row["status"], row["key"]]
        if dag:
            cells.append(", ".join(row["inputs"]) if len(row["inputs"]) <= 3 else f"{len(row['inputs'])} stages")
        table.add_row(*cells)
    output.print(table)
    counts: dict[str, int] = {}
    for row in rows:
        counts[f"{row['kind']} {row['status']}"] = counts.get(f"{row['kind']} {row['status']}", 0) + 1
    output.print(", ".join(f"{count} {name}" for name, count in sorted(counts.items())))


class ProgressHook:
    """Shows one line per stage as it starts and finishes."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
def run(
    spec: Path = SPEC_ARGUMENT,
    overrides: Optional[list[str]] = OVERRIDES_ARGUMENT,
    force: Optional[list[str]] = typer.Option(
        None, "--force", help="Rerun stages whose name matches this glob (repeatable; `*` for all)."
    ),
    keep_going: Optional[bool] = typer.Option(
        None, "--keep-going/--fail-fast",
        help="Keep running independent stages after one fails (default: on, from execution.keep_going).",
    ),
) -> None:
    """Run a workflow: fit every method × temperature × seed, evaluate, plot, report."""
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
    except BayesflowError as error:
        _fail(error)
    _summary(result)
    raise typer.Exit(result.exit_code)


@app.command()
def ui(
    tracking_uri: str = typer.Option("sqlite:///mlflow.db", "--tracking-uri", help="The MLflow store."),
    port: int = typer.Option(5000, "--port", help="Port of the UI."),
) -> None:
    """Open the MLflow UI on the bayesflow store (the same default as `run`)."""
    from bayesflow.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri, Path.cwd())
    console.print(f"MLflow UI on {uri} at http://127.0.0.1:{port}")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--port", str(port)]
    os.execv(sys.executable, command)


@app.command()
def schema(
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Write the JSON Schema of the spec (for editors with a YAML language server)."""
    from bayesflow.spec.models import WorkflowSpec

    text = json.dumps(WorkflowSpec.model_json_schema(by_alias=True), indent=2)
    if out is None:
        output.print(text, markup=False, highlight=False)
    else:
        out.write_text(text + "\n")
        console.print(f"wrote {out}")


@app.command()
def engines() -> None:
    """List the inference engines with their parameters and defaults."""
    from bayesflow.spec.methods import ENGINE_SPECS

    table = Table(title="engines")
    table.add_column("engine")
    table.add_column("what")
    table.add_column("parameters (default)")
    for name, model in ENGINE_SPECS.items():
        fields = [
            f"{field.alias or key}={'required' if field.is_required() else _default(field)}"
            for key, field in model.model_fields.items() if key != "engine"
        ]
        table.add_row(name, (model.__doc__ or "").strip().splitlines()[0], ", ".join(fields))
    output.print(table)


def _default(field: Any) -> str:
    value = field.get_default(call_default_factory=True)
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return repr(value)


def main() -> None:
    """Entry point of the ``bayesflow`` script."""
    app()


if __name__ == "__main__":
    main()
