"""``bayesflow validate`` and ``bayesflow plan``: check a spec and show its stages."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from bayesflow.cli.app import (
    MULTIRUN_OPTION,
    OVERRIDES_ARGUMENT,
    SPEC_ARGUMENT,
    app,
    guarded,
    load,
    output,
    print_table,
)

__all__ = ["counts_text", "plan", "validate"]


@app.command()
@guarded
def validate(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    resolved: bool = typer.Option(False, "--resolved", help="Print the resolved spec with defaults."),
    multirun: bool = MULTIRUN_OPTION,
) -> None:
    """Check a spec and its data: exit 0 when valid, 3 with every problem located."""
    loaded = load(spec, overrides, multirun)
    if multirun:  # every variant, as `run -m` would load it
        for item in loaded.variants:
            checked_data(item.loaded)
        output.print(f"{spec}: valid ({len(loaded.variants)} variants)", markup=False, highlight=False)
        return
    checked_data(loaded)
    if resolved:
        sys.stdout.write(loaded.to_yaml())
    else:
        counts = ", ".join(
            f"{count} {noun}{'' if count == 1 else 's'}" for count, noun in (
                (len(loaded.spec.methods), "method"), (len(loaded.spec.temperatures), "temperature"),
                (len(loaded.spec.seeds), "seed"),
            )
        )
        output.print(f"{spec}: valid ({counts})", markup=False, highlight=False)
        for line in user_code(loaded.spec):
            output.print(f"  runs your code: {line}", markup=False, highlight=False)


def checked_data(loaded: Any) -> Any:
    """Load the spec's data and run the checks a run makes before any fit (labels in the
    likelihood's support, no NaN or infinite values, enough rows for the split), so that
    ``validate`` fails with the same message and exit code 3 as ``run`` would.

    Raises:
        DataError: the data cannot be used with the spec's likelihood.
    """
    from bayesflow.variants import load_data

    return load_data(loaded)


def user_code(spec: Any) -> list[str]:
    """What a run of ``spec`` imports or executes that is not bayesflow's own: a
    ``python:`` model or dataset, and a report template given as a path (a notebook is code)."""
    found = []
    # The two names that mean "the user's own code" (the escape hatch), not a model family:
    # the notice lists what runs that is not bayesflow's, whatever family runs it.
    if getattr(spec.model, "name", None) == "python":
        found.append(f"model.python {spec.model.python} (imported and called)")
    if getattr(spec.data, "name", None) == "python":
        found.append(f"data.module {spec.data.module} (executed; data.function {spec.data.function} called)")
    template = str(spec.report.template)
    if spec.report.enabled and ("/" in template or template.endswith(".py")):
        found.append(f"report.template {template} (a notebook, executed by the report kernel)")
    return found


@app.command()
@guarded
def plan(
    spec: Path = SPEC_ARGUMENT,
    overrides: list[str] | None = OVERRIDES_ARGUMENT,
    dag: bool = typer.Option(False, "--dag", help="Show the graph: each stage and its inputs."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    multirun: bool = MULTIRUN_OPTION,
) -> None:
    """Show the stages a run would execute: new, cached or stale (and why)."""
    from bayesflow.api import plan_table

    loaded = load(spec, overrides, multirun)
    rows = plan_table(loaded)
    if as_json:
        output.print_json(json.dumps(rows))
        return
    if dag:
        output.print(_dag_text(rows), markup=False, highlight=False)
    else:
        print_table(_plan_rich_table(rows, (loaded.first if multirun else loaded).spec.name))
    output.print(counts_text(rows), markup=False, highlight=False)
    shared = len(rows) - len({row["key"] for row in rows})
    if shared:  # equal settings across methods or a sweep's variants
        output.print(f"{shared} stages have the key of another stage: computed once", markup=False, highlight=False)


def _plan_rich_table(rows: list[dict[str, Any]], workflow: str) -> Table:
    table = Table(title=f"plan of {workflow}")
    table.add_column("stage", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("key", no_wrap=True)
    stale = any(row["reason"] for row in rows)
    swept = any(row.get("variant") for row in rows)
    if swept:
        table.add_column("variant")
    if stale:
        table.add_column("why stale")
    for row in rows:
        extra = [*([row["variant"]] if swept else []), *([row["reason"]] if stale else [])]
        table.add_row(row["stage"], row["status"], row["key"], *extra)
    return table


def _dag_text(rows: list[dict[str, Any]]) -> str:
    """The graph as indented text: each stage (inputs first), its inputs below it."""
    lines = []
    for row in rows:
        reason = f": {row['reason']}" if row["reason"] else ""
        lines.append(f"{row['stage']}  [{row['status']}{reason}]")
        lines += [f"    <- {name}" for name in row["inputs"]]
    return "\n".join(lines)


def counts_text(rows: list[dict[str, Any]]) -> str:
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
