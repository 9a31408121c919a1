"""The Markdown of the ``trunk`` case (torch-free: read by :mod:`benchmarks.speed.report`)."""

from __future__ import annotations

from typing import Any

from benchmarks.speed.tables import number, table

__all__ = ["trunk_section"]

LABELS = {"last_layer": "last decoder layer", "lora": "LoRA r 8, α 16, q/v of the last layer"}
REGIMES = {"new": "new windows every step", "seen": "windows seen before"}
MEBIBYTE = 2**20


def _mib(value: float) -> str:
    return f"{value / MEBIBYTE:,.0f}"


def _goal(value: float, goal: float, at_most: bool) -> str:
    met = value <= goal if at_most else value >= goal
    return f"{value:.2f}" + ("" if met else " (**not met**)")


def _steps(rows: list[dict[str, Any]], goals: dict[str, float]) -> list[str]:
    body = []
    for row in rows:
        found = row["contenders"]
        for regime, label in REGIMES.items():
            ratios = row["ratios"][regime]
            body.append([
                LABELS.get(row["subset"], row["subset"]), label,
                *(f"{found[name]['step_s'][regime] * 1e3:,.0f}"
                  for name in ("one_chain", "chains", "chains_whole", "members")),
                _goal(ratios["chains_over_one"], goals["chains_over_one"], True),
                _goal(ratios["members_over_chains"], goals["members_over_chains"], False),
                f"{ratios['whole_over_chains']:.2f}",
                f"{found['chains']['computed'][regime]:,}",
                number(row["load_average"][0], "{:.1f}"),
            ])
    chains = rows[0]["chains"]
    return table(
        ["subset", "windows", "(a) 1 chain ms", f"(b) {chains} chains ms", f"(c) {chains} chains, whole ms",
         f"(d) {chains} members ms", f"b / a (≤ {goals['chains_over_one']:g})",
         f"d / b (≥ {goals['members_over_chains']:g})", "c / b", "(b) windows through the trunk", "load"],
        body,
    )


def _memory(rows: list[dict[str, Any]], goals: dict[str, float]) -> list[str]:
    body = [[
        LABELS.get(row["subset"], row["subset"]), f"{row['d']:,}",
        _mib(row["contenders"]["chains"]["peak_bytes"]), _mib(row["contenders"]["chains"]["built_bytes"]),
        _mib(row["state_bytes"]), f"{row['contenders']['chains']['kept_bytes'] / MEBIBYTE:,.1f}",
        _mib(row["expected_bytes"]), _goal(row["memory_ratio"], goals["memory_ratio"], True),
        " / ".join(_mib(row["contenders"][name]["peak_bytes"]) for name in ("one_chain", "chains_whole", "members")),
    ] for row in rows]
    chains = rows[0]["chains"]
    return table(
        ["subset", "d", "(b) peak MiB", "built model MiB", f"{chains} × (θ, momenta) MiB", "kept MiB",
         "sum MiB", f"(b) / sum (≤ {goals['memory_ratio']:g})", "peak MiB (a) / (c) / (d)"],
        body,
    )


def _scoring(rows: list[dict[str, Any]]) -> list[str]:
    body = []
    for row in rows:
        found, chains = row["scoring"]["timings"], row["chains"]
        cells = [f"{found[key]['first_s']:,.2f} / {found[key]['again_s']:,.2f}"
                 for key in ("shared_1", f"shared_{chains}", "whole_1", f"whole_{chains}")]
        many, one = found[f"shared_{chains}"], found["shared_1"]
        whole = found[f"whole_{chains}"]
        body.append([
            LABELS.get(row["subset"], row["subset"]), *cells,
            f"{many['first_s'] / one['first_s']:.2f} / {many['again_s'] / one['again_s']:.2f}",
            f"{whole['first_s'] / found['whole_1']['first_s']:.2f}",
            f"{whole['first_s'] / many['first_s']:.2f} / {whole['again_s'] / many['again_s']:.2f}",
            f"{row['scoring']['max_log_prob_difference']:.1e}",
            number(row["scoring"]["load_average"][0], "{:.1f}"),
        ])
    chains = rows[0]["chains"]
    return table(
        ["subset", "shared, 1 member s", f"shared, {chains} members s", "whole, 1 member s",
         f"whole, {chains} members s", f"shared {chains} / 1", f"whole {chains} / 1",
         f"whole / shared, {chains} members", "largest log p difference", "load"],
        body,
    )


def trunk_section(results: dict[str, Any]) -> list[str]:
    """Step times, (b)'s memory and the statement scoring of both subsets."""
    rows, goals = results["rows"], results["goals"]
    first, chains = rows[0], results["chains"]
    statements = first["scoring"]["statements"]
    return [
        (f"### The shared trunk (issue 31): SmolLM2-135M's shape, {first['parameters']:,} parameters, "
         f"size `{results['size']}`"),
        "",
        ("bayesflow's `sghmc` step (median ms), each contender in a fresh process: (a) 1 chain and "
         f"(b) {chains} chains vmapped on the shared trunk (layers 0–{first['trunk_start'] - 1} once per "
         f"window), (c) {chains} chains vmapped on the whole forward (`share_trunk=False`, the before), "
         f"(d) {chains} single-chain members one after another on the whole forward (posteriors' "
         "Bayesian Llama example; one step is ten). *New windows*: fresh windows every step (the "
         "first epoch); *seen before*: steps cycling through 4 batches already met once (later "
         "epochs: the kept hidden states are read back; nothing is kept on the whole forward)."),
        "",
        *_steps(rows, goals),
        "",
        (f"Peak resident memory of (b) (`ru_maxrss`) against one built model + {chains} × (θ and "
         "momenta, 2 float32 vectors of d) + the kept hidden states (64 × hidden × 4 bytes a window)."),
        "",
        *_memory(rows, goals),
        "",
        (f"Statement scoring (`score_statements`, the evaluate stage's call) of {statements} statements "
         "of 12 to 20 tokens, seconds of the first call on a fresh problem / the same call again; the "
         "ratios likewise. The last column checks the two forwards agree."),
        "",
        *_scoring(rows),
    ]
