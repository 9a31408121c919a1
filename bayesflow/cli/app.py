"""The typer application, its consoles and the error guard every command runs under.

Exit codes (a contract other tools rely on): 0 success; 1 a stage failed; 2 usage
error; 3 the spec is invalid. Errors print as messages, never as a Python traceback
unless ``--debug`` is given.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bayesflow.errors import BayesflowError

__all__ = [
    "DEBUG",
    "FORCE_OPTION",
    "MULTIRUN_OPTION",
    "OUT_OPTION",
    "OVERRIDES_ARGUMENT",
    "REGISTRIES",
    "SPEC_ARGUMENT",
    "TRACKING_URI_OPTION",
    "app",
    "console",
    "guarded",
    "load",
    "output",
    "print_table",
]

REGISTRIES = "Registries: what a spec can name"

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Declarative workflows for tempered Bayesian deep learning posteriors.",
)
console = Console(stderr=True, soft_wrap=True)
output = Console(soft_wrap=True)
# MLflow draws a progress bar for every artifact download; the summary does several.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
DEBUG = {"on": False}

SPEC_ARGUMENT = typer.Argument(
    ..., help="The workflow YAML file, or the name of a bundled workflow (`bayesflow workflows`).",
    show_default=False, metavar="SPEC",
)
OVERRIDES_ARGUMENT = typer.Argument(
    None,
    metavar="KEY=VALUE",
    help="Overrides such as `temperatures=[0.1,1] methods.vi.epochs=5` (`+key=value` adds a key).",
)
MULTIRUN_OPTION = typer.Option(
    False, "--multirun", "-m",
    help="Sweep: an override with comma-separated values (`prior.variance=0.1,1`, "
    "`model.hidden=[32,32],[64,64]`) runs every combination, as one run.",
)
FORCE_OPTION = typer.Option(
    None, "--force", help="Rerun stages whose name matches this glob (repeatable; `*` for all)."
)
TRACKING_URI_OPTION = typer.Option(
    None, "--tracking-uri",
    help="The MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here).",
    show_default=False,
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


def guarded(command: Callable[..., None]) -> Callable[..., None]:
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


def load(spec: Path, overrides: list[str] | None, multirun: bool = False) -> Any:
    """The spec with its overrides (a sweep with ``multirun``); a spec error raised
    without ``-m`` by overrides that would sweep says so."""
    from bayesflow.api import load
    from bayesflow.errors import SpecError
    from bayesflow.spec.sweep import unswept_commas

    try:
        return load(spec, overrides or [], multirun=multirun)
    except SpecError as error:
        sweeping = [] if multirun else unswept_commas(overrides or [])
        if not sweeping:
            raise
        hint = f"to sweep {', '.join(repr(text) for text in sweeping)}, add -m (multirun)"
        raise SpecError([*error.problems, hint], error.path) from None


def print_table(renderable: Any) -> None:
    """Print a table to standard output at the terminal's width, or unwrapped when the
    output is not a terminal (a pipe, a file, a test), so what is printed never depends on
    the size of a terminal that is not there."""
    if output.is_terminal:
        output.print(renderable)
    else:  # rich caps a print's width at the console's, which reads $COLUMNS
        Console(width=1_000, soft_wrap=True).print(renderable)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("bayesflow-workflows")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown (not installed)"
        output.print(f"bayesflow {number}", markup=False, highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show Python tracebacks of errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Declarative workflows for tempered Bayesian deep learning posteriors."""
    DEBUG["on"] = debug
