"""The sections every report shares, as Markdown text and tables for a notebook to show.

A template opens with :func:`header` and :func:`what_ran`, shows its own figures and
:func:`~bayesflow.report.figures.results_table`, and closes with :func:`spec_block` and
:func:`run_links`, so every report reads the same way::

    display(Markdown(sections.header(workflow, spec_yaml)))
    display(Markdown(sections.what_ran(frame)))
    ...
    display(Markdown(sections.spec_block(spec_yaml)))
    display(Markdown(sections.run_links(data.parent_run_ids, tracking_uri, frame)))

Every function returns text or a frame and draws nothing, so it is tested without a kernel.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
import yaml

from bayesflow.report.tables import failed_cells, results_table

__all__ = ["escape", "header", "metric_table", "read_spec", "run_links", "spec_block", "what_ran"]

DEFAULT_STORE = "sqlite:///mlflow.db"


def read_spec(spec_yaml: str) -> dict[str, Any]:
    """The resolved spec as a mapping; ``{}`` when it is empty or not YAML."""
    try:
        spec = yaml.safe_load(spec_yaml) if spec_yaml else {}
    except yaml.YAMLError:
        return {}
    return spec if isinstance(spec, dict) else {}


def escape(text: Any) -> str:
    """A user's string made safe for a Markdown cell: HTML is shown, never executed (a
    ``<script>`` in a spec's description must not run when the report is opened)."""
    return html.escape(str(text), quote=False)


def header(workflow: str, spec_yaml: str) -> str:
    """The workflow's name and the spec's description (what it studies and why), escaped."""
    lines = [f"**Workflow:** `{workflow or 'unnamed'}`"]
    description = read_spec(spec_yaml).get("description", "")
    if description:
        lines.append(escape(str(description).strip()))
    return "\n\n".join(lines)


def what_ran(frame: pd.DataFrame) -> str:
    """How many fits finished and failed, the methods, temperatures and seeds, and a
    list of the failed (or skipped) fits with their errors."""
    failed = failed_cells(frame)
    sampled = frame.loc[frame["temperature"] > 0]
    temperatures = sorted(pd.unique(sampled["temperature"]))
    lines = [
        f"- **{len(frame)}** fits: **{len(frame) - len(failed)}** finished, **{len(failed)}** failed",
        f"- methods: {', '.join(f'`{method}`' for method in pd.unique(frame['method']))}",
        "- temperatures: " + (", ".join(f"{value:g}" for value in temperatures) or "none > 0"),
        f"- seeds: {', '.join(str(seed) for seed in sorted(pd.unique(frame['seed'])))}",
    ]
    if not failed.empty:
        lines.append("- **failed fits** (left out of means and figures): " + "; ".join(
            f"`{row['method']}` T={row['temperature']:g} seed {row['seed']} ({_reason(row)})"
            for row in failed.to_dict("records")
        ))
    return "\n".join(lines)


def _reason(row: dict[str, Any]) -> str:
    """A failed cell's status and the first line of its error, when the frame has one."""
    error = str(row.get("error") or "").strip().splitlines()
    return f"{row['status']}: {escape(error[0][:200])}" if error else str(row["status"])


def metric_table(
    frame: pd.DataFrame, metrics: list[str], order: list[str] | None = None
) -> pd.DataFrame:
    """:func:`~bayesflow.report.figures.results_table` of the ``metrics`` the frame has,
    methods in ``order`` (the spec's) first, and "—" where fits finished without the
    metric (it does not apply: no KSD at T → 0, no distance of the reference to itself)
    rather than "failed"."""
    present = [metric for metric in metrics if metric in frame.columns]
    table = results_table(frame, present)
    rank = {method: index for index, method in enumerate(order or [])}
    table = table.sort_values(
        "method", key=lambda column: column.map(lambda method: rank.get(method, len(rank))),
        kind="stable",
    ).reset_index(drop=True)
    finished = ~table["finished"].str.startswith("0/")
    for metric in present:
        table.loc[finished & (table[metric] == "failed"), metric] = "—"
    return table


def spec_block(spec_yaml: str) -> str:
    """The resolved spec as a fenced YAML block."""
    if not spec_yaml:
        return "_No spec was passed to this report._"
    return f"```yaml\n{spec_yaml.rstrip()}\n```"


def run_links(
    run_ids: str | list[str], tracking_uri: str, frame: pd.DataFrame | None = None
) -> str:
    """Where the runs are: the parent run(s), the store and how to browse it, and a line
    per fit in ``frame``: its ``runs:/<id>`` link (the URI MLflow's APIs accept) when the
    frame holds ``run_id`` (read from the store), else its cell, which names its run.

    Args:
        run_ids: the parent run(s); none for a report rendered by its run's report stage
            (which is cached and shared by reruns, so it names no run: it is logged to
            each run it belongs to).
        tracking_uri: the store (empty: the default, ``sqlite:///mlflow.db``).
        frame: the results, to list each fit.
    """
    parents = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    store = tracking_uri or DEFAULT_STORE
    lines = [f"- MLflow run: `{run}`" for run in parents if run] or [(
        "- MLflow run: the parent run this report is logged to (`bayesflow run` prints its "
        "id; the report's folder is named after it); each fit is a child run of it, named "
        "after its cell"
    )]
    lines += [
        f"- tracking URI: `{store}`",
        (
            "- browse every fit, its parameters and artifacts (`posterior/posterior.npz`, "
            "`evaluation/evaluation.npz`) with `bayesflow ui` in the workflow's folder, or "
            f"`mlflow ui --backend-store-uri {store}`"
        ),
    ]
    if frame is not None and not frame.empty:
        by_run = "run_id" in frame.columns
        lines += ["", f"| method | T | seed | status | {'fit run' if by_run else 'cell'} |",
                  "| --- | --- | --- | --- | --- |"]
        for row in frame.to_dict("records"):
            where = f"runs:/{row['run_id']}" if by_run else row.get("cell", "")
            lines.append(
                f"| `{row['method']}` | {row['temperature']:g} | {row['seed']} | {row['status']} "
                f"| `{where}` |"
            )
    return "\n".join(lines)
