"""``bayesflow schema`` and the registry listings (``engines``, ``models``, ...)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from bayesflow.cli.app import OUT_OPTION, REGISTRIES, app, console, guarded, output, print_table

__all__ = ["plots", "schema", "show_registry"]


@app.command()
@guarded
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


def show_registry(kind: str, singular: str, name: str | None) -> None:
    """Print one registry (``bayesflow engines``), or one entry's keys (``bayesflow engines NAME``)."""
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
    print_table(_entry_table(chosen[0], singular))


def _listing(kind: str, singular: str) -> None:
    """Register the command listing one registry (``bayesflow engines`` and friends)."""

    def command(
        name: str | None = typer.Argument(
            None, help=f"Show one {singular}'s keys with types and descriptions.", show_default=False
        ),
    ) -> None:
        show_registry(kind, singular, name)

    command.__doc__ = f"The {kind} a spec can name, with keys and defaults."
    app.command(name=kind, rich_help_panel=REGISTRIES)(guarded(command))


def _entries_text(found: list[Any], singular: str) -> str:
    """Each entry's names, summary and ``key=default`` list, wrapped to the terminal."""
    width = max(40, output.width) if output.is_terminal else 100
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


# `models` is bayesflow.cli.pretrained's: the registry, and `pull` / `list` of pretrained models.
for _kind, _singular in (
    ("engines", "engine"), ("datasets", "dataset"),
    ("likelihoods", "likelihood"), ("priors", "prior"),
):
    _listing(_kind, _singular)


@app.command(rich_help_panel=REGISTRIES)
@guarded
def workflows() -> None:
    """The workflows shipped with bayesflow, run by name (`bayesflow run cold_posterior`)."""
    from bayesflow.spec.bundled import bundled_workflows, describe

    table = Table(title="bundled workflows (bayesflow run NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("studies")
    for name, path in bundled_workflows().items():
        table.add_row(name, describe(path))
    print_table(table)


@app.command(rich_help_panel=REGISTRIES)
@guarded
def plots() -> None:
    """The plots a spec can list under `plots:`."""
    from bayesflow.spec.catalog import plot_entries

    table = Table(title="plots")
    table.add_column("plot")
    table.add_column("draws")
    for name, what in plot_entries():
        table.add_row(name, what)
    print_table(table)
