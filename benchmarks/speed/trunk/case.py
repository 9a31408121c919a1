"""Case ``trunk``: the frozen trunk computed once for every chain and member (issue 31, item 4).

SmolLM2-135M's shape (hidden 576, intermediate 1,536, 30 layers, 9 heads, 3 key-value heads,
vocabulary 49,152, tied output layer; random float32 weights built from the config;
``--quick``: 6 layers of the same widths; ``--smoke``: a tiny one), 8 windows of 64 tokens
scoring the last 32, for the last decoder layer and for LoRA (r 8, α 16, q/v) on it. Each
contender of :mod:`benchmarks.speed.trunk.child` in its own fresh process, one after another:

- step times of bayesflow's ``sghmc``: (a) 1 chain and (b) K chains on the shared trunk,
  (c) K chains on the whole forward (the before), (d) K members one after another on the
  whole forward (posteriors' Bayesian Llama example), on new windows every step and on
  windows met before; the ratios b / a (goal ≤ 1.5), d / b (goal ≥ 5) and c / b;
- (b)'s peak memory against one built model + K × (θ and momenta: 2 float32 vectors of d)
  + the kept hidden states (goal ≤ 1.2×);
- statement scoring (:func:`bayesflow.llm.statement_scores.score_statements`) of 100 short
  statements (``--quick``: 20) under K members against one, shared trunk against whole forward.

The processes run one after another, so their step times saw different moments of the
machine's load: each row gives the load average at its start.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common.fresh import fresh_process
from benchmarks.common.timing import Settings, load_average
from benchmarks.speed.trunk.child import CONTENDERS, TRAINABLE

__all__ = ["CHAINS", "GOALS", "REGIMES", "run", "subset_row"]

CHAINS = 10
REGIMES = ("new", "seen")
# (warm-up, timed steps of each regime; the scoring's repeats) per mode: at full size a step
# of ten chains takes about 17 s on one thread, of ten members about 40 s, a scoring of 100
# statements under ten members about 60 s (each member's output layer: docs/benchmarks.md).
STEPS = {"smoke": (1, 2), "quick": (1, 1), "full": (1, 2)}
STATEMENTS = {"smoke": 100, "quick": 20, "full": 100}
# Issue 31's goals: b / a at most, d / b at least, (b)'s memory over the sum at most.
GOALS = {"chains_over_one": 1.5, "members_over_chains": 5.0, "memory_ratio": 1.2}


def child(contender: str, subset: str, settings: Settings, chains: int = CHAINS) -> dict[str, Any]:
    """One contender (or ``scoring``) in a fresh process; its JSON."""
    warmup, steps = STEPS.get(settings.mode, STEPS["full"])
    size = settings.mode if settings.mode in STEPS else "full"
    arguments = ["benchmarks.speed.trunk.child", contender, subset, size, settings.device,
                 f"--chains={chains}", f"--warmup={warmup}", f"--steps={steps}", f"--threads={settings.threads}",
                 f"--statements={STATEMENTS[size]}"]
    return fresh_process(arguments, settings, f"trunk: {contender} on {subset} ({size})")


def subset_row(subset: str, found: dict[str, Any], scoring: dict[str, Any], load: list[float]) -> dict[str, Any]:
    """One subset's measurements and ratios (see the module docstring)."""
    one, chains, whole, members = (found[name] for name in CONTENDERS)
    ratios = {regime: {
        "chains_over_one": chains["step_s"][regime] / one["step_s"][regime],
        "members_over_chains": members["step_s"][regime] / chains["step_s"][regime],
        "whole_over_chains": whole["step_s"][regime] / chains["step_s"][regime],
    } for regime in REGIMES}
    state = chains["chains"] * 2 * chains["d"] * 4
    expected = chains["built_bytes"] + state + chains["kept_bytes"]
    return {
        "subset": subset, "d": chains["d"], "parameters": chains["parameters"],
        "frozen_parameters": chains["frozen_parameters"], "trunk_start": chains["trunk_start"],
        "chains": chains["chains"], "contenders": found, "ratios": ratios, "scoring": scoring,
        "state_bytes": state, "expected_bytes": expected, "memory_ratio": chains["peak_bytes"] / expected,
        "load_average": load,
    }


def run(settings: Settings) -> dict[str, Any]:
    """Case ``trunk``: both subsets, four contenders and the scoring each."""
    rows = []
    for subset in TRAINABLE:
        load = load_average()
        found = {name: child(name, subset, settings) for name in CONTENDERS}
        scoring = {**child("scoring", subset, settings), "load_average": load_average()}
        rows.append(subset_row(subset, found, scoring, load))
    size = settings.mode if settings.mode in STEPS else "full"
    return {"size": size, "device": settings.device, "chains": CHAINS, "goals": GOALS, "rows": rows}
