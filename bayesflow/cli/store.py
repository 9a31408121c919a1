"""Commands on the tracking store: ``bayesflow report`` and ``bayesflow ui``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from bayesflow.cli.app import TRACKING_URI_OPTION, app, console, guarded, output
from bayesflow.errors import UsageError

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
    tracking_uri: str | None = TRACKING_URI_OPTION,
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


def _check_port(host: str, port: int) -> None:
    """Refuse a port the UI could not serve on, before handing over to MLflow (which would
    otherwise report the clash after this process has already been replaced)."""
    import socket

    try:
        with socket.create_server((host, port), reuse_port=False):
            pass
    except OSError as error:
        raise UsageError(
            f"cannot serve the UI on {host}:{port}: {error.strerror or error}; "
            "pick a free port with --port (or another --host)"
        ) from None


def _served_uri(tracking_uri: str | None) -> str:
    """The store's URI for ``mlflow ui``: a SQLite file under the working folder by its
    relative path. MLflow's server makes the folder of a SQLite store from the URI's text
    without unquoting it, so an absolute URI of a folder named ``a b%`` would make an empty
    ``a%20b%25`` beside it; the UI runs in this folder, where ``mlflow.db`` needs none."""
    from bayesflow.tracking.uri import resolve_tracking_uri, sqlite_database, sqlite_uri

    uri = resolve_tracking_uri(tracking_uri, Path.cwd())
    database = sqlite_database(uri)
    if database is None or "?" in uri or not database.is_relative_to(Path.cwd().resolve()):
        return uri
    return sqlite_uri(database.relative_to(Path.cwd().resolve()))


def runs_page(uri: str) -> str:
    """The UI page of the runs table of the experiment whose run started last (where a
    ``bayesflow run`` just logged), or the experiments list of an empty store. MLflow 3's
    UI opens on its GenAI home page unless the address asks for model training."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from bayesflow.tracking.uri import sqlite_database

    page = "?workflowType=machine_learning"
    database = sqlite_database(uri)
    if database is not None and not database.is_file():  # nothing to show; create nothing
        return f"#/experiments{page}"
    try:
        client = MlflowClient(uri)
        experiments = [experiment.experiment_id for experiment in client.search_experiments()]
        runs = client.search_runs(experiments, max_results=1, order_by=["attributes.start_time DESC"])
    except (MlflowException, OSError):  # the server will say what is wrong with the store
        return f"#/experiments{page}"
    if not runs:
        return f"#/experiments{page}"
    return f"#/experiments/{runs[0].info.experiment_id}/runs{page}"


@app.command()
@guarded
def ui(
    tracking_uri: str | None = TRACKING_URI_OPTION,
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to serve on (0.0.0.0 serves every interface)."
    ),
    port: int = typer.Option(5000, "--port", min=1, max=65535, help="Port of the UI."),
) -> None:
    """Open the MLflow UI on the bayesflow store (`run`'s default); exits 2 when the
    address cannot be served."""
    uri = _served_uri(tracking_uri)
    _check_port(host, port)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    console.print(f"MLflow UI on {uri} at http://{shown}:{port}/{runs_page(uri)}", highlight=False)
    command = [
        sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
        "--host", host, "--port", str(port),
    ]
    os.execv(sys.executable, command)
