"""Commands on the tracking store: ``bayesflow report`` and ``bayesflow ui``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from bayesflow.cli.app import app, console, guarded, output

__all__ = ["report", "ui"]


@app.command()
@guarded
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
@guarded
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
