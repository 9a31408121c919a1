"""The Markdown tables of each benchmark section (:mod:`benchmarks.speed.report` assembles them).

Every timing is a median over repeats; where a spread is shown it is half the
interquartile range over the median (``±5%``), and a ratio's range is the smallest and
largest of the paired repeats' ratios (:func:`benchmarks.common.timing.paired_ratio`). Each
section names the 1-minute load average at its start: the machine's other jobs.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "digits_section",
    "grids_section",
    "number",
    "pima_section",
    "table",
    "workflow_section",
]


def number(value: float | None, form: str = "{:.2f}") -> str:
    """A figure, or ``n/a``."""
    return "n/a" if value is None else form.format(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _ms(timing: dict[str, Any] | None) -> str:
    if timing is None:
        return "n/a"
    return f"{timing['median_s'] * 1e3:.2f} ±{timing['spread']:.0%}"


def _ratio(paired: dict[str, float] | None, unit: str = "") -> str:
    if paired is None:
        return "n/a"
    return f"{paired['median']:.2f}{unit} ({paired['min']:.2f}–{paired['max']:.2f})"


def _load(row: dict[str, Any]) -> str:
    loads = row.get("load_average")
    return "n/a" if not loads else f"{loads[0][0]:.1f}"


def pima_section(pima: dict[str, Any]) -> list[str]:
    """Per-step milliseconds of each method, and K chains against every contender."""
    lines = [
        "### 1. Logistic regression on Pima (768 × 8, prior variance 1, T = 1)",
        "",
        (
            "Milliseconds per update step of one chain (median ±spread). *posteriors* is its "
            "documented use (a tree of named tensors, a new state per step); *flat, in place* "
            "gives it one flat tensor and `inplace=True`. Ratio = bayesflow / posteriors time "
            "(lower is better; median of the paired repeats, their range in brackets); *vs "
            "fastest* divides by the faster posteriors variant."
        ),
        "",
    ]
    rows = [
        [
            row["method"],
            row["batch"],
            _ms(row["timings"].get("bayesflow")),
            _ms(row["timings"]["posteriors"]),
            _ms(row["timings"]["posteriors_flat_inplace"]),
            _ratio(row.get("ratio_paired")),
            _ratio(row.get("ratio_best_paired")),
            _load(row),
        ]
        for row in pima["per_step"]
    ]
    lines += table(
        [
            "method",
            "batch",
            "bayesflow ms",
            "posteriors ms",
            "posteriors flat, in place ms",
            "ratio",
            "ratio vs fastest",
            "load",
        ],
        rows,
    )
    return lines + [""] + _chains(pima["chains"])


def _chains(chains: list[dict[str, Any]]) -> list[str]:
    lines = [
        (
            "SGHMC with K chains, thousands of chain-steps per second. *stacked*: posteriors "
            "over one (K, d) state whose log posterior is the chains' sum (flat, in place); "
            "*looped*: posteriors as documented, a Python loop over K states; *floor*: the "
            "hand-written flat-tensor loop (benchmarks/speed/floor.py). At batch 32 every chain "
            "has its own minibatch order (bayesflow's default), the same batches for all. "
            "*× stacked* and *× looped* are bayesflow's speed-ups (their time / bayesflow's, "
            "> 1: bayesflow faster); */ floor* is bayesflow's time over the floor's."
        ),
        "",
    ]
    rows = []
    for row in chains:
        rate = row["chain_steps_per_s"]
        looped = f"{rate['posteriors_looped'] / 1e3:,.1f}"
        if row["estimated"]:
            looped += f" (on {row['posteriors_chains_timed']})"
        rows.append(
            [
                row["batch"],
                f"{row['chains']:,}",
                f"{rate['bayesflow'] / 1e3:,.1f}",
                f"{rate['posteriors_stacked'] / 1e3:,.1f}",
                looped,
                f"{rate['floor'] / 1e3:,.1f}",
                _ratio(row["speedup_vs_stacked"], "×"),
                f"{row['speedup']:,.1f}×",
                _ratio(row["ratio_vs_floor"]),
                _load(row),
            ]
        )
    return lines + table(
        [
            "batch",
            "K",
            "bayesflow",
            "stacked",
            "looped",
            "floor",
            "× stacked",
            "× looped",
            "/ floor",
            "load",
        ],
        rows,
    )


def digits_section(digits: dict[str, Any]) -> list[str]:
    """Milliseconds per epoch of each engine against posteriors."""
    data = digits["data"]
    lines = [
        (
            f"### 2. MLP on sklearn digits ({data['rows']} training images, "
            f"d = {data['dimension']:,}, batch {data['batch_size']})"
        ),
        "",
        "Milliseconds per epoch (median ±spread); Laplace's epoch is its one curvature pass.",
        "",
    ]
    lines += _epochs(digits["per_epoch"])
    if "large" in digits:
        large = digits["large"]
        lines += [
            "",
            f"Larger MLP ({large['hidden']} hidden units, d = {large['dimension']:,}):",
            "",
        ]
        lines += _epochs(large["per_epoch"])
    return lines


def _epochs(rows: list[dict[str, Any]]) -> list[str]:
    return table(
        ["engine", "steps/epoch", "bayesflow ms", "posteriors ms", "ratio", "load"],
        [
            [
                row["method"],
                str(row["steps_per_epoch"]),
                _ms(row["timings"].get("bayesflow")),
                _ms(row["timings"]["posteriors"]),
                _ratio(row.get("ratio_paired")),
                _load(row),
            ]
            for row in rows
        ],
    )


def grids_section(grids: dict[str, Any]) -> list[str]:
    """Every stage a grid costs against one cell, and the paper's parallel SGHMC."""
    sghmc, laplace, paper = (
        grids["sghmc_grid"],
        grids["laplace_grid"],
        grids["paper_parallel_sghmc"],
    )
    lines = [
        "### 3. Grids and the paper's parallel SGHMC",
        "",
        (
            "Seconds of every stage a run costs, by kind (median over "
            f"{sghmc['repeats']} interleaved repeats after one untimed run of each). "
            "Ratio = grid / one cell: all stages, and the fitting stages only."
        ),
        "",
    ]
    kinds = ("fit_group", "curvature", "fit", "evaluate")
    rows = []
    for title, result, fit_note in (
        (
            f"SGHMC, 5 T × 2 seeds vectorised, digits MLP, {sghmc['epochs']} epochs",
            sghmc,
            "fit_group + fit",
        ),
        (
            (
                f"Laplace (diag GGN) from MAP ({laplace['map_epochs']} epochs), "
                f"{laplace['temperatures']} T"
            ),
            laplace,
            "fit + curvature",
        ),
    ):
        for side in ("one", "grid"):
            stages = result[f"{side}_stage_s"]
            rows.append(
                [
                    f"{title}: {'one cell' if side == 'one' else 'grid'}",
                    *[number(stages.get(kind)) for kind in kinds],
                    number(result[f"{side}_total_s"]),
                    (
                        f"{_ratio(result['total_ratio'])}; {fit_note} {_ratio(result['fit_ratio'])}"
                        if side == "grid"
                        else ""
                    ),
                    _load(result),
                ]
            )
    lines += table(["run", *kinds, "all stages", "ratio", "load"], rows)
    steps = sghmc.get("per_step")
    if steps:
        timing = steps["timings"]
        lines += [
            "",
            (
                "The SGHMC grid per step (digits MLP, batch 128, interleaved): the grid's "
                f"engine {_ms(timing['bayesflow_grid'])} ms against one chain's "
                f"{_ms(timing['bayesflow_one'])} ms, ratio {_ratio(steps['bayesflow_ratio'])}; "
                f"the hand-written floor, ten chains {_ms(timing['floor_ten'])} ms against "
                f"one {_ms(timing['floor_one'])} ms, ratio {_ratio(steps['floor_ratio'])}."
            ),
        ]
    lines += ["", paper_sentence(paper)]
    if "at_contender_threads" in paper:
        lines += ["", "With the contenders' threads: " + paper_sentence(paper["at_contender_threads"])]
    return lines


def paper_sentence(paper: dict[str, Any]) -> str:
    """Table 3's run in one paragraph."""
    how = "extrapolated linearly in steps from" if paper["extrapolated"] else "measured:"
    estimate = "n/a" if paper["paper_wall_s"] is None else f"{paper['paper_wall_s']:.1f} s"
    threads = paper.get("threads", 1)
    return (
        f"Paper's parallel SGHMC on Pima (Table 3, batch 32, each chain its own minibatch "
        f"order, {threads} torch thread{'s' if threads != 1 else ''}): {estimate} for "
        f"10,000 chains × 2,000 steps ({how} `fit` of "
        f"{paper['chains']:,} chains × {paper['steps']:,} steps, "
        f"{paper['wall_s']:.2f} s median of {paper['wall']['repeats']} "
        f"(range {paper['wall']['min_s']:.1f}–{paper['wall']['max_s']:.1f} s), of which "
        f"{paper['init_s']:.2f} s starting the chains; "
        f"{paper['seconds_per_step'] * 1e3:.2f} ms per step; load {_load(paper)}). "
        f"Of the wall, the minibatch stream (each epoch's {paper['chains']:,} orders "
        "and each step's gather of the chains' batches, timed alone) takes about "
        f"{paper['minibatch_stream_s']:.1f} s."
    )


def workflow_section(workflow: dict[str, Any]) -> list[str]:
    """The default workflow's wall time by part, and its no-op rerun."""
    wall = workflow["wall_s"]
    lines = [
        (
            f"### 4. The default workflow end to end ({workflow['workflow']}, "
            f"{workflow['stages']} stages, tracker {workflow['tracker']}, "
            f"load {_load(workflow)})"
        ),
        "",
    ]
    if workflow["overrides"]:
        lines += ["Overrides: " + " ".join(f"`{item}`" for item in workflow["overrides"]), ""]
    first = workflow["tracking_first_call"]
    parts = [(f"{kind} stages", seconds) for kind, seconds in sorted(workflow["stage_s"].items())]
    if "tracking_wait_s" in workflow:  # the hook's calls on a worker thread
        parts += [
            ("tracking: calls the run made itself (the parent's metrics and end)",
             workflow["tracking_blocking_calls_s"]),
            ("tracking: waiting at the end for the worker (its last calls, the parent's end)",
             workflow["tracking_wait_s"]),
        ]
    else:
        parts += [
            (f"tracking: first call (`{first['method']}`: import mlflow, create the store)",
             first["seconds"]),
            ("tracking: every other MLflow call", workflow["tracking_s"] - first["seconds"]),
        ]
    parts.append(
        (
            "other (loading the spec and data, planning, the cache, hooks)",
            wall - workflow["stage_time_s"] - workflow["tracking_s"],
        )
    )
    rows = [[name, f"{seconds:.1f}", f"{seconds / wall:.1%}"] for name, seconds in parts]
    rows.append(["wall", f"{wall:.1f}", "100%"])
    rows.append(
        [
            (
                f"no-op rerun ({workflow['rerun_cached_stages']} of {workflow['rerun_stages']} "
                "stages cached)"
            ),
            f"{workflow['rerun_wall_s']:.1f}",
            f"{workflow['rerun_ratio']:.1%}",
        ]
    )
    lines += table(["part", "seconds", "share"], rows)
    if "tracking_overlapped_s" in workflow and not workflow["tracking_calls"]:
        lines += [
            "",
            (
                "The MLflow calls were made by the tracking worker process while the stages "
                "went on (not timed from the run's process); what they cost the run as a whole "
                "is the cross-check in the targets: the wall without tracking, plots and report."
            ),
        ]
    elif "tracking_overlapped_s" in workflow:
        lines += [
            "",
            (
                f"The tracking worker's calls took {workflow['tracking_overlapped_s']:.1f} s on "
                f"its own thread while the stages went on (its first, `{first['method']}`, "
                f"{first['seconds']:.1f} s: import mlflow, open the store); they are not in the "
                "shares above, and what sharing the interpreter with them costs the stages is "
                "in the stages' seconds."
            ),
        ]
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
