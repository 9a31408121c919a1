"""Cases ``llm`` and ``llm8b``: a language model's trainable subset, bayesflow against the
plain torch + peft loop (the floor) and against posteriors (issue 23, item 7).

``llm`` (``--quick``: hidden 256, 4 layers, vocabulary 2,048; full: the 144.8M-parameter
Llama of docs/llm.md, hidden 768, 14 layers, vocabulary 8,192; ``--smoke``: a tiny one),
config-built, random weights, 4 windows of 64 tokens scoring the last 16:

- for LoRA (r 8, α 32 on q/k/o of the last layer) and for the last decoder layer: a MAP
  step with AdamW by the floor, by bayesflow's ``map`` engine and by posteriors
  (:mod:`benchmarks.speed.llm.child` says how each is driven): the peak memory of each in its
  own fresh process, and the step time of the three on one model in one more process,
  timed interleaved, with the ratios bayesflow / floor (goal ≤ 1.2 each) and bayesflow /
  posteriors (goal ≤ 1), each the median of the per-repeat ratios;
- bayesflow's parallel SGHMC, 10 chains of the last layer: peak memory against one frozen
  model (the process once the model is built) plus 10 × the subset with its momenta
  (2 float32 vectors of d per chain), the sum printed beside it, and the step time;
- for each subset, in one more fresh process (:mod:`benchmarks.speed.llm.gradient`): the
  bytes the problem adds to the model against the frozen weights' bytes, and one gradient's
  milliseconds, bayesflow's chain gradient (one chain, and 10 chains vmapped over the one
  frozen model) against the plain peft loop's.

``llm8b`` (``--cases llm8b --device cuda``; refused on a CPU by :mod:`benchmarks.speed.run`):
Llama 3 8B's shape (hidden 4,096, intermediate 14,336, 32 layers, 32 heads, 8 key-value
heads, vocabulary 128,256), random bfloat16 weights built on the GPU, its last layer
(218,112,000 parameters) trainable, bayesflow's SGHMC with 10 chains: step time and peak
memory against the same sum.

For memory every contender runs in its own fresh process, so peaks do not mix (on the
CPU the process's ``ru_maxrss``; on a GPU ``torch.cuda.max_memory_allocated``); those
processes run one after another, so their own step times (kept in the JSON) saw
different moments of the machine's load, and the interleaved ones are the ratios.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.common.fresh import fresh_process
from benchmarks.common.timing import Settings, load_average
from benchmarks.speed.llm.child import SUBSETS

__all__ = ["CHAINS", "run", "run_8b"]

CHAINS = 10
# warm-up and timed steps per mode (each step of the full size takes about a second);
# the interleaved timing's repeats.
STEPS = {"smoke": (1, 2), "quick": (1, 3), "full": (1, 3)}
REPEATS = {"smoke": 2, "quick": 5, "full": 7}
CONTENDERS = ("floor", "bayesflow", "posteriors")


def child(contender: str, subset: str, size: str, settings: Settings, chains: int = CHAINS) -> dict[str, Any]:
    """One contender in a fresh process (:mod:`benchmarks.speed.llm.child`; ``gradient``:
    :mod:`benchmarks.speed.llm.gradient`); its JSON."""
    warmup, steps = STEPS.get(settings.mode, STEPS["full"])
    if contender in ("interleaved", "gradient"):
        steps = REPEATS.get(settings.mode, REPEATS["full"])
    common = [f"--chains={chains}", f"--threads={settings.threads}"]
    if contender == "gradient":
        arguments = ["benchmarks.speed.llm.gradient", "--json", f"--size={size}", f"--subsets={subset}",
                     f"--device={settings.device}", f"--repeats={steps}", *common]
    else:
        arguments = ["benchmarks.speed.llm.child", contender, subset, size, settings.device,
                     f"--warmup={warmup}", f"--steps={steps}", *common]
    result = fresh_process(arguments, settings, f"{contender} on {subset} ({size})")
    if "seconds" in result:
        result["step_s"] = statistics.median(result["seconds"])
    return result


def _size(settings: Settings) -> str:
    return {"smoke": "smoke", "quick": "quick"}.get(settings.mode, "full")


def subset_row(subset: str, found: dict[str, Any], timed: dict[str, Any], load: list[float]) -> dict[str, Any]:
    """One subset's row: each contender's measurements, the memory ratios of the fresh
    processes' peaks, the step ratios of the interleaved timing."""
    ours = found["bayesflow"]
    return {
        "subset": subset, "d": ours["d"], "parameters": ours["parameters"],
        "frozen_parameters": ours["frozen_parameters"], "frozen_bytes": ours["frozen_bytes"],
        "contenders": found, "load_average": load, "interleaved": timed,
        "memory_ratio": ours["peak_bytes"] / found["floor"]["peak_bytes"],
        "posteriors_memory_ratio": ours["peak_bytes"] / found["posteriors"]["peak_bytes"],
        "step_ratio": timed["floor_ratio"]["median"],
        "posteriors_step_ratio": timed["posteriors_ratio"]["median"],
    }


def _chains_row(found: dict[str, Any]) -> dict[str, Any]:
    """The SGHMC chains' peak against one frozen model plus K × (position and momenta)."""
    state = found["chains"] * 2 * found["d"] * 4
    expected = found["built_bytes"] + state
    return {**found, "state_bytes": state, "expected_bytes": expected,
            "memory_ratio": found["peak_bytes"] / expected}


def run(settings: Settings) -> dict[str, Any]:
    """Case ``llm``: both subsets, three contenders each, and the 10-chain SGHMC."""
    size = _size(settings)
    rows = []
    for subset in SUBSETS:
        load = load_average()
        found = {name: child(name, subset, size, settings) for name in CONTENDERS}
        timed = child("interleaved", subset, size, settings)
        for name in CONTENDERS:
            found[name]["interleaved_s"] = timed["timings"][name]["median_s"]
        rows.append(subset_row(subset, found, timed, load))
    load = load_average()
    chains = _chains_row(child("sghmc", "last_layer", size, settings))
    chains["load_average"] = load
    gradient = [{**child("gradient", subset, size, settings), "load_average": load_average()} for subset in SUBSETS]
    return {"size": size, "device": settings.device, "rows": rows, "chains": chains, "gradient": gradient}


def run_8b(settings: Settings) -> dict[str, Any]:
    """Case ``llm8b``: Llama 3 8B's shape, last layer, 10 chains of SGHMC (a GPU)."""
    load = load_average()
    chains = _chains_row(child("sghmc", "last_layer", "llama3_8b", settings))
    chains["load_average"] = load
    return {"size": "llama3_8b", "device": settings.device, "chains": chains}
