"""The targets of issue 7, and the results as JSON and as a Markdown table.

The Markdown goes between two markers in ``docs/benchmarks.md``
(:data:`START` and :data:`END`), so the hand-written text around it (how to run, what
the numbers mean, the profile findings) survives a rerun.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["END", "START", "markdown", "targets", "write_doc"]

START = "<!-- benchmark results: start (written by python -m benchmarks.run) -->"
END = "<!-- benchmark results: end -->"


# ------------------------------------------------------------------------ targets


def _find(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [row for row in rows if all(row.get(k) == v for k, v in match.items())]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each issue-7 target with its measured value, its goal and whether it is met.

    Step ratios are judged against posteriors' fastest variant measured (the
    conservative choice); every target whose case did not run is left out.
    """
    out: list[dict[str, Any]] = []

    def add(name: str, measured: float | None, goal: str, met: bool | None, detail: str) -> None:
        out.append(
            {"target": name, "measured": measured, "goal": goal, "met": met, "detail": detail}
        )

    pima = results.get("pima")
    if pima:
        for method, label in (("sghmc", "SGHMC"), ("vi_diag", "VI (diag)")):
            rows = [row for row in _find(pima["per_step"], method=method) if row.get("bayesflow_s")]
            if rows:
                worst = max(row["ratio_best"] for row in rows)
                detail = ", ".join(f"batch {row['batch']}: {row['ratio_best']:.2f}" for row in rows)
                add(
                    f"{label} single-chain step on Pima (bayesflow / posteriors time)",
                    worst,
                    "≤ 0.33",
                    worst <= 1 / 3,
                    detail,
                )
        rows = _find(pima["chains"], chains=100)
        if rows:
            worst = min(row["speedup"] for row in rows)
            detail = ", ".join(f"batch {row['batch']}: {row['speedup']:.1f}×" for row in rows)
            add(
                "100 parallel chains (chain-steps/s, bayesflow / posteriors)",
                worst,
                "≥ 50",
                worst >= 50,
                detail,
            )
    grids = results.get("grids")
    if grids:
        laplace = grids["laplace_grid"]
        add(
            f"{laplace['temperatures']}-temperature Laplace grid / one temperature (fit stages)",
            laplace["fit_ratio"],
            "≤ 1.2",
            laplace["fit_ratio"] <= 1.2,
            f"fit + evaluate stages: {laplace['fit_evaluate_ratio']:.2f}",
        )
        sghmc = grids["sghmc_grid"]
        if sghmc["supported"]:
            add(
                "10-chain SGHMC grid (5 T × 2 seeds) / one chain, digits MLP",
                sghmc["ratio"],
                "≤ 2",
                sghmc["ratio"] <= 2,
                "one engine call, vectorised",
            )
        else:
            add(
                "10-chain SGHMC grid (5 T × 2 seeds) / one chain, digits MLP",
                None,
                "≤ 2",
                None,
                f"not supported yet (no per-chain temperatures); 10 chains at one T cost "
                f"{sghmc['ratio']:.2f}× one chain; as 10 separate cells about 10×",
            )
        paper = grids["paper_parallel_sghmc"]
        if paper["paper_wall_s"] is not None:
            how = "extrapolated from " if paper["extrapolated"] else ""
            add(
                "Paper's parallel SGHMC on Pima (10,000 chains × 2,000 steps, batch 32), seconds",
                paper["paper_wall_s"],
                "≤ 30",
                paper["paper_wall_s"] <= 30,
                f"{how}{paper['chains']:,} chains × {paper['steps']:,} steps",
            )
    workflow = results.get("workflow")
    if workflow:
        share = workflow["tracking_report_share"]
        add(
            "Tracking + report share of the default workflow's wall time",
            share,
            "≤ 0.15",
            share <= 0.15,
            f"tracking {workflow['tracking_share']:.1%} (of which "
            f"{workflow['tracking_share'] - workflow['tracking_steady_share']:.1%} the first "
            f"MLflow call: import and store creation), report {workflow['report_share']:.1%} "
            f"of {workflow['wall_s']:.0f} s",
        )
    return out


# ----------------------------------------------------------------------- writing


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f}"


def _number(value: float | None, form: str = "{:.2f}") -> str:
    return "n/a" if value is None else form.format(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _met(value: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not supported yet"}[value]


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables (the part of docs/benchmarks.md between markers)."""
    info, settings = results["machine"], results["settings"]
    lines = [
        (
            f"Run {results['date']} ({results['time']}), mode `{settings['mode']}`, "
            f"`{results['command']}`."
        ),
        "",
        f"- Machine: {info['cpu']}, {info['cores']} cores"
        + (f", GPU {info['gpu']}" if "gpu" in info else "")
        + f"; device `{info['device']}`, {info['threads']} torch thread(s) for both libraries.",
        (
            f"- Load average (1, 5, 15 min) at start {_loads(info['load_average'])}, at end "
            f"{_loads(results['load_average_end'])}: other engineers' jobs shared the cores."
        ),
        (
            f"- Python {info['python']}, torch {info['torch']}, posteriors {info['posteriors']}; "
            f"bayesflow at {info.get('bayesflow_revision', 'unknown')}."
        ),
        f"- Total benchmark time {results['seconds']:.0f} s.",
        "",
        "### Targets",
        "",
    ]
    lines += _table(
        ["target", "measured", "goal", "status", "detail"],
        [
            [t["target"], _number(t["measured"]), t["goal"], _met(t["met"]), t["detail"]]
            for t in results["targets"]
        ],
    )
    sections: list[tuple[str, Callable[[dict[str, Any]], list[str]]]] = [
        ("pima", _pima),
        ("digits", _digits),
        ("grids", _grids),
        ("workflow", _workflow),
    ]
    for key, render in sections:
        if key in results:
            lines += [""] + render(results[key])
    return "\n".join(lines) + "\n"


def _loads(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


def _pima(pima: dict[str, Any]) -> list[str]:
    lines = [
        "### 1. Logistic regression on Pima (768 × 8, prior variance 1, T = 1)",
        "",
        (
            "Milliseconds per update step (median). *posteriors* is its documented use (a tree "
            "of named tensors, a new state per step); *flat, in place* gives it one flat tensor "
            "and `inplace=True`. Ratio = bayesflow / posteriors (lower is better); "
            "*vs fastest* divides by the faster posteriors variant."
        ),
        "",
    ]
    rows = []
    for row in pima["per_step"]:
        timings = row["timings"]
        rows.append(
            [
                row["method"],
                row["batch"],
                _ms(row["bayesflow_s"]),
                _ms(timings["posteriors"]["median_s"]),
                _ms(timings["posteriors_flat_inplace"]["median_s"]),
                _number(row.get("ratio")),
                _number(row.get("ratio_best")),
            ]
        )
    lines += _table(
        [
            "method",
            "batch",
            "bayesflow ms",
            "posteriors ms",
            "posteriors flat, in place ms",
            "ratio",
            "ratio vs fastest",
        ],
        rows,
    )
    lines += [
        "",
        (
            "SGHMC chain-steps per second with K chains: bayesflow `chains: K` (one vectorised "
            "engine) against posteriors looping over K states in Python."
        ),
        "",
    ]
    rows = []
    for row in pima["chains"]:
        note = (
            f"posteriors timed on {row['posteriors_chains_timed']} of {row['chains']} chains, "
            "scaled"
            if row["estimated"]
            else ""
        )
        rows.append(
            [
                row["batch"],
                str(row["chains"]),
                f"{row['bayesflow_chain_steps_per_s']:,.0f}",
                f"{row['posteriors_chain_steps_per_s']:,.0f}",
                f"{row['speedup']:.1f}×",
                note,
            ]
        )
    lines += _table(
        ["batch", "K", "bayesflow chain-steps/s", "posteriors chain-steps/s", "speed-up", "note"],
        rows,
    )
    return lines


def _digits(digits: dict[str, Any]) -> list[str]:
    data = digits["data"]
    lines = [
        (
            f"### 2. MLP on sklearn digits ({data['rows']} training images, d = {data['dimension']:,}, "
            f"batch {data['batch_size']})"
        ),
        "",
        "Milliseconds per epoch (median); Laplace's epoch is its one curvature pass.",
        "",
    ]
    rows = [
        [
            row["method"],
            str(row["steps_per_epoch"]),
            _ms(row["bayesflow_s"]),
            _ms(row["posteriors_s"]),
            _number(row.get("ratio")),
        ]
        for row in digits["per_epoch"]
    ]
    lines += _table(["engine", "steps/epoch", "bayesflow ms", "posteriors ms", "ratio"], rows)
    if "large" in digits:
        large = digits["large"]
        lines += [
            "",
            f"Larger MLP ({large['hidden']} hidden units, d = {large['dimension']:,}):",
            "",
        ]
        rows = [
            [
                row["method"],
                str(row["steps_per_epoch"]),
                _ms(row["bayesflow_s"]),
                _ms(row["posteriors_s"]),
                _number(row.get("ratio")),
            ]
            for row in large["per_epoch"]
        ]
        lines += _table(["engine", "steps/epoch", "bayesflow ms", "posteriors ms", "ratio"], rows)
    return lines


def _grids(grids: dict[str, Any]) -> list[str]:
    laplace, sghmc, paper = (
        grids["laplace_grid"],
        grids["sghmc_grid"],
        grids["paper_parallel_sghmc"],
    )
    lines = ["### Grids and the paper's parallel SGHMC", ""]
    rows = [
        [
            f"Laplace (diag GGN) from MAP ({laplace['map_epochs']} epochs), digits MLP",
            f"{laplace['one']['stage_s'].get('fit', 0):.2f} s fit",
            f"{laplace['grid']['stage_s'].get('fit', 0):.2f} s fit ({laplace['temperatures']} T)",
            f"{laplace['fit_ratio']:.2f} (fit + evaluate {laplace['fit_evaluate_ratio']:.2f})",
        ],
    ]
    if sghmc["supported"]:
        rows.append(
            [
                "SGHMC, 5 T × 2 seeds vectorised, digits MLP",
                f"{sghmc['one']['stage_s']['fit']:.2f} s",
                f"{sghmc['grid']['stage_s']['fit']:.2f} s",
                f"{sghmc['ratio']:.2f}",
            ]
        )
    else:
        rows.append(
            [
                "SGHMC grid: **not supported yet**; shown: 10 chains at one T vs 1 chain, per epoch",
                f"{sghmc['one_chain_epoch_s'] * 1e3:.1f} ms",
                f"{sghmc['ten_chains_epoch_s'] * 1e3:.1f} ms",
                f"{sghmc['ratio']:.2f}",
            ]
        )
    lines += _table(["grid", "one cell", "grid", "ratio"], rows)
    how = "extrapolated linearly in steps from" if paper["extrapolated"] else "measured:"
    estimate = "n/a" if paper["paper_wall_s"] is None else f"{paper['paper_wall_s']:.1f} s"
    lines += [
        "",
        (
            f"Paper's parallel SGHMC on Pima (batch 32): {estimate} for 10,000 chains × 2,000 "
            f"steps ({how} {paper['chains']:,} chains × {paper['steps']:,} steps in "
            f"{paper['wall_s']:.2f} s, of which {paper['init_s']:.2f} s starting the chains; "
            f"{paper['seconds_per_step'] * 1e3:.2f} ms per step)."
        ),
    ]
    return lines


def _workflow(workflow: dict[str, Any]) -> list[str]:
    wall = workflow["wall_s"]
    lines = [
        (
            f"### 3. The default workflow end to end ({workflow['workflow']}, "
            f"{workflow['stages']} stages, tracker {workflow['tracker']})"
        ),
        "",
    ]
    if workflow["overrides"]:
        lines += ["Overrides: " + " ".join(f"`{item}`" for item in workflow["overrides"]), ""]
    stage, first = workflow["stage_s"], workflow["tracking_first_call"]
    parts = [
        ("fit stages", stage.get("fit", 0.0)),
        ("evaluate stages", stage.get("evaluate", 0.0)),
        ("plot stages (each reads the runs back from the store)", stage.get("plot", 0.0)),
        ("report stage (papermill + nbconvert)", stage.get("report", 0.0)),
        (
            f"tracking: first call (`{first['method']}`: import mlflow, create the store)",
            first["seconds"],
        ),
        ("tracking: every other MLflow call", workflow["tracking_s"] - first["seconds"]),
        ("other (data, planning, cache, hooks)", workflow["other_s"]),
    ]
    rows = [[name, f"{seconds:.1f}", f"{seconds / wall:.1%}"] for name, seconds in parts]
    rows.append(["wall", f"{wall:.1f}", "100%"])
    lines += _table(["part", "seconds", "share"], rows)
    calls = workflow["tracking_calls"]
    if calls:
        busiest = sorted(calls.items(), key=lambda item: -item[1]["seconds"])[:5]
        lines += [
            "",
            "Slowest tracker methods: "
            + ", ".join(
                f"`{name}` {value['seconds']:.1f} s over {value['calls']} calls"
                for name, value in busiest
            )
            + ".",
        ]
    return lines


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
