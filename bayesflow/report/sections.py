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
import re
from typing import Any

import pandas as pd
import yaml

from bayesflow.report.flags import flag_table as flag_rows
from bayesflow.report.flags import linked
from bayesflow.report.suggest import suggested_temperatures
from bayesflow.report.tables import (
    AGREEMENT_METRICS,
    CHOSEN_ON,
    best_temperature_table,
    best_variants,
    failed_cells,
    results_table,
    variant_table,
    variants,
)

__all__ = [
    "best_temperature",
    "code",
    "configurational_note",
    "escape",
    "fenced",
    "flag_table",
    "header",
    "metric_table",
    "read_spec",
    "reference_agreement",
    "reference_method",
    "run_links",
    "spec_block",
    "styled",
    "suggestion",
    "swept_keys",
    "what_ran",
]

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


def code(text: Any) -> str:
    """A user's string as a Markdown code span, shown as text whatever it holds: the
    span's content is never read as HTML, and its fence is one backtick longer than the
    longest run of backticks inside, so no name can close it early."""
    body = " ".join(str(text).split()) or " "
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {body} " if body.startswith("`") or body.endswith("`") else body
    return f"{fence}{padded}{fence}"


def header(workflow: str, spec_yaml: str, run_info: dict[str, Any] | None = None) -> str:
    """The workflow's name, the spec's description (what it studies and why) and, given
    ``run_info`` (the report stage's :func:`~bayesflow.stages.report.run_environment`),
    the bayesflow version and commit, the date rendered, the machine and the device;
    everything escaped."""
    lines = [f"**Workflow:** {code(workflow or 'unnamed')}"]
    description = read_spec(spec_yaml).get("description", "")
    if description:
        lines.append(escape(str(description).strip()))
    info = run_info or {}
    if info:
        commit = str(info.get("commit") or "")
        facts = [
            f"bayesflow {escape(info.get('version', 'unknown'))}"
            + (f" (commit {code(commit[:12])})" if commit else " (no git commit: an installed package)"),
            f"rendered {escape(info.get('rendered', ''))}",
            f"machine {escape(info.get('machine', ''))}",
            f"device {code(info.get('device', 'cpu'))}",
        ]
        lines.append(" · ".join(facts))
    return "\n\n".join(lines)


def what_ran(frame: pd.DataFrame) -> str:
    """How many fits finished and failed, the methods, temperatures, seeds and sweep
    variants, and a list of the failed (or skipped) fits with their errors."""
    failed = failed_cells(frame)
    sampled = frame.loc[frame["temperature"] > 0]
    temperatures = sorted(pd.unique(sampled["temperature"]))
    lines = [
        f"- **{len(frame)}** fits: **{len(frame) - len(failed)}** finished, **{len(failed)}** failed",
        f"- methods: {', '.join(code(method) for method in pd.unique(frame['method']))}",
        "- temperatures: " + (", ".join(f"{value:g}" for value in temperatures) or "none > 0"),
        f"- seeds: {', '.join(str(seed) for seed in sorted(pd.unique(frame['seed'])))}",
    ]
    if variants(frame):
        lines.append(f"- sweep variants: {', '.join(code(v) for v in variants(frame))}")
    if not failed.empty:
        lines.append("- **failed fits** (left out of means and figures): " + "; ".join(
            f"{code(row['method'])} T={row['temperature']:g} seed {row['seed']} ({_reason(row)})"
            for row in failed.to_dict("records")
        ))
    return "\n".join(lines)


def styled(table: pd.DataFrame, precision: int = 3) -> Any:
    """A table ready to display: no index, temperatures as ``0.1``, numbers at
    ``precision`` digits, every string HTML-escaped (a pandas Styler does not escape by
    default, so a method name could otherwise inject markup) and each flag mark a link to
    its row of the flags table (:func:`bayesflow.report.flags.linked`)."""
    style = linked(table).style.hide(axis="index").format(precision=precision, na_rep="")
    if "temperature" in table.columns:
        style = style.format({"temperature": "{:g}"}, subset=["temperature"])
    return style


def flag_table(frame: pd.DataFrame) -> Any:
    """The flags raised on the finished fits as one table to display
    (:func:`bayesflow.report.flags.flag_table`), whose rows the marks of every
    :func:`styled` table link to; an empty HTML output when none was raised."""
    from IPython.display import HTML

    return HTML(flag_rows(frame))


def configurational_note(frame: pd.DataFrame) -> str:
    """A plain-words sentence on the cells whose mean configurational temperature ratio is
    negative (what it means and what to do), or "" when none is."""
    column = "configurational_temperature_ratio"
    if column not in frame.columns:
        return ""
    finished = frame.loc[frame["status"].astype(str) == "FINISHED"]
    means = pd.to_numeric(finished[column], errors="coerce").groupby(
        [finished["method"], finished["temperature"]], sort=False).mean()
    negative = means[means < 0]
    if negative.empty:
        return ""
    cells = ", ".join(f"{code(method)} at T = {float(temperature):g} ({value:.3g})"
                      for (method, temperature), value in negative.items())
    return (
        f"**A negative configurational temperature ratio** ({cells}): the mean of θ·∇U(θ) over "
        "the parameters is below 0, which no sample of the tempered posterior gives (there it "
        "averages T > 0 per parameter). The parameters still sit where the posterior rises as they move on, "
        "typically short of the region it holds: the chain has not finished its way there. "
        "Its samples are not the posterior's yet; run longer (`burn_in`, `epochs`) or with a "
        "larger step."
    )


def best_temperature(frame: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """A sentence and :func:`~bayesflow.report.tables.best_temperature_table` for the
    frame: per method (and variant), the temperature of lowest mean validation NLL over
    seeds (test NLL without a validation split), and the test metrics there."""
    table = best_temperature_table(frame, "test_nll")
    if table.empty:
        return "_No fit logged a test NLL, so no temperature is best._", table
    second = "accuracy" if "test_accuracy" in table else "RMSE" if "test_rmse" in table else ""
    numbers = "its test NLL" + (f" and {second}" if second else "")
    on = set(table[CHOSEN_ON])
    if on == {"validation"}:
        how = (
            "Per method, the temperature with the lowest mean **validation** NLL over seeds "
            "(rows held out of training, `val_nll`), and " + numbers + " there: the test "
            "rows took no part in the choice."
        )
    else:
        how = (
            "Per method, the temperature with the lowest mean NLL over seeds, and " + numbers
            + " there. `chosen on` says which rows chose it: where it reads *test*, the "
            "temperature was chosen on the test NLL it reports, an optimistic number (set "
            "`data.validation_fraction` to choose on rows held out of training)."
        )
    text = how + (
        " Mean ± sd over the seeds that finished. A method whose fit does not depend on "
        "the temperature has one row."
    )
    return text + suggestion(frame), table


def suggestion(frame: pd.DataFrame) -> str:
    """A paragraph of the temperatures suggested between grid points by the validation
    NLL (:mod:`bayesflow.report.suggest`), or "" when there are none to give."""
    found = suggested_temperatures(frame, "test_nll")
    shown = [
        f"{code(key[-1])}{' [' + escape(key[0]) + ']' if len(key) > 1 else ''} "
        + (": none, its best is at the grid's edge" if value is None else f"T ≈ {value:.3g}")
        for key, value in found.items()
    ]
    if not any(value is not None for value in found.values()):
        return ""
    return (
        "\n\n*Suggested, not fitted:* a parabola in log T through each method's mean "
        "validation NLL at its best grid temperature and the two beside it; its lowest point: "
        + "; ".join(shown) + ". No fit was run there: a temperature to try next."
    )


def swept_keys(frame: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """For a sweep over spec keys (several ``variant`` values): a sentence naming the
    swept keys and :func:`~bayesflow.report.tables.variant_table` (each method's test
    NLL at its best temperature, and that temperature, in each variant), with each
    method's best variant chosen on validation where the fits have it
    (:func:`~bayesflow.report.tables.best_variants`). Empty text and table for a plain study."""
    found = variants(frame)
    table = variant_table(frame, "test_nll")
    if not found or table.empty:
        return "", table
    keys = [column.split("/", 1)[1] for column in frame.columns if str(column).startswith("swept/")]
    named = ", ".join(code(key) for key in keys) or "the swept keys"
    winners = [
        f"{code(method)}: {code(variant)} (chosen on {on})"
        for method, (variant, on) in best_variants(frame, "test_nll").items()
    ]
    return (
        f"The sweep varied {named} over {len(found)} variants. Each cell: the method's "
        "test NLL at its best temperature in that variant, and that temperature (chosen "
        "as in the table above). Best variant by method, by the NLL that chose its "
        "temperature: " + ("; ".join(winners) or "none finished") + ".",
        table,
    )


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


def reference_method(spec: dict[str, Any]) -> str | None:
    """The method ``evaluate.reference`` names in a resolved spec (``reference: nuts`` or
    ``{method: nuts}``), or None (no reference, or a reference file)."""
    reference = (spec.get("evaluate") or {}).get("reference")
    if isinstance(reference, dict):
        reference = reference.get("method")
    return reference if isinstance(reference, str) else None


def reference_agreement(
    frame: pd.DataFrame, spec: dict[str, Any], order: list[str] | None = None
) -> tuple[str, pd.DataFrame]:
    """What each fit's predictive is compared with and the table of the scores
    (:data:`~bayesflow.report.tables.AGREEMENT_METRICS`, mean ± sd over seeds), the
    reference's own rows reading "reference"; empty text and table when the spec sets no
    ``evaluate.reference`` or no fit logged a score."""
    reference = (spec.get("evaluate") or {}).get("reference")
    present = [metric for metric in AGREEMENT_METRICS if metric in frame.columns]
    if not reference or not present:
        return "", pd.DataFrame()
    method = reference_method(spec)
    stated = reference.get("temperature") if isinstance(reference, dict) else None
    if method is not None:
        at = f"at T = {float(stated):g}" if stated is not None else "at the same temperature"
        against = f"the predictive of {code(method)} {at} and seed"
    else:
        against = f"the class probabilities of {code(reference.get('file', ''))}"
    table = metric_table(frame, present, order)
    if method is not None:
        own = table["method"] == method
        if stated is not None:
            own &= table["temperature"].astype(float) == float(stated)
        table.loc[own, present] = "reference"
    scores = {
        "agreement": "agreement (the fraction of points whose most probable class is the "
        "reference's; 1 is best)",
        "total_variation": "total variation (the mean over points of ½ Σ_c |p(c|x) − "
        "p_ref(c|x)|; 0 is best)",
        "wasserstein_2": "the 2-Wasserstein distance of the two predictives, each "
        "moment-matched to a Gaussian (mean over points; 0 is best)",
    }
    text = (
        f"Each fit's predictive against {against}: "
        + " and ".join(scores[metric] for metric in present)
        + ", as in the NeurIPS 2021 approximate inference competition (Wilson et al.), "
        "on the test rows (the training rows when none are held out); mean ± sd over "
        "seeds. A method fitted once for every temperature is compared only with a "
        "reference that is too, or with one at a stated temperature."
    )
    return text, table


def spec_block(spec_yaml: str) -> str:
    """The resolved spec as a fenced YAML block."""
    if not spec_yaml:
        return "_No spec was passed to this report._"
    return fenced(spec_yaml, "yaml")


def fenced(text: str, language: str = "") -> str:
    """``text`` as a fenced code block whose fence is longer than any run of backticks
    in it, so a user's text (a description holding ```) cannot end the block early and
    have the rest read as Markdown or HTML."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


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
                f"| {code(row['method'])} | {row['temperature']:g} | {row['seed']} | "
                f"{escape(row['status'])} | {code(where)} |"
            )
    return "\n".join(lines)
