"""The targets of issue 16, and the results as a Markdown table.

The Markdown goes between two markers in ``docs/benchmarks.md`` (:data:`START` and
:data:`END`), so the hand-written text around it (how to run, what the numbers mean, why
a target is or is not met) survives a rerun. The section tables are in
:mod:`benchmarks.speed.tables`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.speed.kfac.table import kfac_section
from benchmarks.speed.llm.table import llm8b_section, llm_section
from benchmarks.speed.tables import (
    digits_section,
    grids_section,
    number,
    pima_section,
    table,
    workflow_section,
)
from benchmarks.speed.trunk.table import trunk_section

__all__ = ["END", "START", "markdown", "targets", "write_doc"]

START = "<!-- benchmark results: start (written by python -m benchmarks.speed.run) -->"
END = "<!-- benchmark results: end -->"

# Chain counts of the "K ≥ 100" rows (issue 16).
MANY_CHAINS = 100


def _find(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [row for row in rows if all(row.get(k) == v for k, v in match.items())]


class _Targets:
    """The list of targets being built: one row each."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(
        self, name: str, measured: float | None, goal: str, met: bool | None, detail: str
    ) -> None:
        self.rows.append(
            {"target": name, "measured": measured, "goal": goal, "met": met, "detail": detail}
        )


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each issue-16 target with its measured value, its goal and whether it is met.

    Conservative throughout: a step ratio is judged against posteriors' faster variant;
    a chains target against the worse batch size; a target whose case did not run is left
    out.
    """
    out = _Targets()
    if "pima" in results:
        _step_targets(out, results["pima"])
        _chain_targets(out, results["pima"]["chains"])
    if "grids" in results:
        _grid_targets(out, results["grids"])
    if "workflow" in results:
        _workflow_targets(out, results["workflow"])
    return out.rows


def _step_targets(out: _Targets, pima: dict[str, Any]) -> None:
    for method, label in (("sghmc", "SGHMC"), ("vi_diag", "VI (diag)")):
        rows = [row for row in _find(pima["per_step"], method=method) if row.get("bayesflow_s")]
        full = [row for row in rows if row["batch"] == "full"]
        if not full:
            continue
        measured = full[0]["ratio_best"]
        detail = f"vs posteriors as documented {full[0]['ratio']:.2f}" + "".join(
            f"; batch {row['batch']}: {row['ratio_best']:.2f}"
            for row in rows
            if row["batch"] != "full"
        )
        out.add(
            f"{label} single-chain step / posteriors' (Pima, full batch)",
            measured,
            "≤ 0.33",
            measured <= 1 / 3,
            detail,
        )


def _chain_targets(out: _Targets, chains: list[dict[str, Any]]) -> None:
    for count in (100, 10_000):
        rows = _find(chains, chains=count)
        if rows:
            worst = min(row["speedup_vs_stacked"]["median"] for row in rows)
            out.add(
                f"{count:,} chains: posteriors stacked time / bayesflow's",
                worst,
                "≥ 2",
                worst >= 2,
                _by_batch(rows, "speedup_vs_stacked", "×"),
            )
    for label, selected in (
        ("K = 1", [row for row in chains if row["chains"] == 1]),
        ("K ≥ 100", [row for row in chains if row["chains"] >= MANY_CHAINS]),
    ):
        if selected:
            worst_row = max(selected, key=lambda row: row["ratio_vs_floor"]["median"])
            worst = worst_row["ratio_vs_floor"]["median"]
            detail = "; ".join(
                f"K = {row['chains']:,} batch {row['batch']}: {row['ratio_vs_floor']['median']:.2f}"
                for row in selected
            )
            out.add(
                f"SGHMC {label}: bayesflow time / hand-written floor's (Pima)",
                worst,
                "≤ 1.3",
                worst <= 1.3,
                detail,
            )


def _by_batch(rows: list[dict[str, Any]], key: str, unit: str) -> str:
    return ", ".join(f"batch {row['batch']}: {row[key]['median']:.2f}{unit}" for row in rows)


def _grid_targets(out: _Targets, grids: dict[str, Any]) -> None:
    sghmc = grids["sghmc_grid"]
    out.add(
        "10-chain SGHMC grid (5 T × 2 seeds, vectorised) / one chain, all stages",
        sghmc["ratio"],
        "≤ 2",
        sghmc["ratio"] <= 2,
        f"fit_group + fit stages only: {sghmc['fit_ratio']['median']:.2f}; "
        f"{sghmc['grid_total_s']:.2f} s against {sghmc['one_total_s']:.2f} s, "
        f"{sghmc['epochs']} epochs"
        + (
            f"; per step {sghmc['per_step']['bayesflow_ratio']['median']:.2f}, the "
            f"hand-written floor's 10 chains / 1: {sghmc['per_step']['floor_ratio']['median']:.2f}"
            if "per_step" in sghmc
            else ""
        ),
    )
    paper = grids["paper_parallel_sghmc"]
    if paper["paper_wall_s"] is not None:
        how = "extrapolated from " if paper["extrapolated"] else "measured, "
        out.add(
            "Table 3: 10,000 chains × 2,000 steps on Pima (batch 32), wall seconds",
            paper["paper_wall_s"],
            "≤ 15",
            paper["paper_wall_s"] <= 15,
            f"{how}{paper['steps']:,} steps of `fit`, median of {paper['wall']['repeats']}, "
            f"{paper.get('threads', 1)} torch thread(s) as `bayesflow run` has them here"
            + (
                f"; with the contenders' {contender['threads']}: {contender['paper_wall_s']:.1f} s"
                if (contender := paper.get("at_contender_threads", {})).get("paper_wall_s")
                else ""
            ),
        )


def _workflow_targets(out: _Targets, workflow: dict[str, Any]) -> None:
    share = workflow["tracking_report_share"]
    out.add(
        "Tracking + report share of the default workflow's wall time",
        share,
        "≤ 0.10",
        share <= 0.10,
        f"tracking {workflow['tracking_share']:.1%} (waited for; "
        f"{workflow.get('tracking_overlapped_s', 0.0):.1f} s more on the tracking worker), plot "
        f"and report stages {workflow['report_share']:.1%} of {workflow['wall_s']:.0f} s"
        + (
            f"; by difference from a run without them ({workflow['bare_wall_s']:.0f} s, its "
            f"compute stages {workflow['bare_compute_s']:.0f} s against "
            f"{workflow['compute_s']:.0f} s): {workflow['added_share']:.2f}"
            if "added_share" in workflow else ""
        ),
    )
    ratio = workflow["rerun_ratio"]
    out.add(
        "No-op rerun / full run of the default workflow (wall)",
        ratio,
        "≤ 0.15",
        ratio <= 0.15,
        f"{workflow['rerun_wall_s']:.1f} s against {workflow['wall_s']:.1f} s, "
        f"{workflow['rerun_cached_stages']} of {workflow['rerun_stages']} stages cached",
    )
    stage_time = workflow["stage_time_s"]
    out.add(
        "Default workflow stage time, seconds",
        stage_time,
        "≤ 120",
        stage_time <= 120,
        f"sum of {workflow['stages']} stages' seconds; wall {workflow['wall_s']:.0f} s",
    )


def _met(value: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "n/a"}[value]


def _loads(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables (the part of docs/benchmarks.md between markers)."""
    info, settings = results["machine"], results["settings"]
    versions = info.get("versions", {})
    lines = [
        (
            f"Run {results['date']} ({results['time']}), mode `{settings['mode']}`, "
            f"`{results['command']}`."
        ),
        "",
        f"- Machine: {info['cpu']}, {info['cores']} cores"
        + (f", GPU {info['gpu']}" if "gpu" in info else "")
        + f"; device `{info['device']}`, {info['threads']} torch thread(s) for every contender.",
        (
            f"- Load average (1, 5, 15 min) at start {_loads(info['load_average'])}, at end "
            f"{_loads(results['load_average_end'])} (each section gives its own)."
        ),
        "- "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f"; bayesflow at {info.get('bayesflow_revision', 'unknown')}.",
        f"- Total benchmark time {results['seconds']:.0f} s.",
        "",
        "### Targets (issue 16)",
        "",
    ]
    lines += table(
        ["target", "measured", "goal", "status", "detail"],
        [
            [t["target"], number(t["measured"]), t["goal"], _met(t["met"]), t["detail"]]
            for t in results["targets"]
        ],
    )
    sections: list[tuple[str, Callable[[dict[str, Any]], list[str]]]] = [
        ("pima", pima_section),
        ("digits", digits_section),
        ("grids", grids_section),
        ("workflow", workflow_section),
        ("kfac", kfac_section),
        ("llm", llm_section),
        ("llm8b", llm8b_section),
        ("trunk", trunk_section),
    ]
    for key, render in sections:
        if key in results:
            lines += [""] + render(results[key])
    for key, error in results.get("failed", {}).items():
        lines += ["", f"**Case `{key}` failed** and has no rows in this run: `{error}`"]
    return "\n".join(lines) + "\n"


def write_doc(results: dict[str, Any], path: Path) -> None:
    """Put the tables between the markers of ``path`` (creating it if needed)."""
    block = f"{START}\n\n{markdown(results)}\n{END}"
    if path.exists() and START in (text := path.read_text()) and END in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
        path.write_text(before + block + after)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Benchmarks\n\n{block}\n")
