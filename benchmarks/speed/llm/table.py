"""The Markdown of the ``llm`` and ``llm8b`` cases (torch-free: read by :mod:`benchmarks.speed.report`)."""

from __future__ import annotations

from typing import Any

from benchmarks.speed.tables import number, table

__all__ = ["gradient_lines", "llm8b_section", "llm_section"]

LABELS = {"lora": "LoRA r 8, α 32, q/k/o of the last layer", "last_layer": "last decoder layer"}
MEBIBYTE = 2**20


def _mib(value: float) -> str:
    return f"{value / MEBIBYTE:,.0f}"


def _paired(ratio: dict[str, float]) -> str:
    return f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})"


def _status(value: float, goal: float) -> str:
    return "met" if value <= goal else "**not met**"


def _memory_word(device: str) -> str:
    return "peak GPU memory allocated" if device.startswith("cuda") else "peak resident memory (ru_maxrss)"


def llm_section(results: dict[str, Any]) -> list[str]:
    """Both subsets against the floor and posteriors, and the 10-chain SGHMC."""
    rows = results["rows"]
    first = rows[0]
    lines = [
        (f"### Language model subsets (issue 23): config-built Llama, {first['parameters']:,} "
         f"parameters, size `{results['size']}`"),
        "",
        (f"A MAP step with AdamW on the same model and windows, each contender in a fresh "
         f"process: {_memory_word(results['device'])} in MiB (the built model included, "
         "the same in every process); the median step in ms of the three on one model in "
         "one more process, timed interleaved, and the median (range) of the per-repeat "
         "ratios. The floor is a plain torch + "
         "peft loop (`torch.optim.AdamW`, `backward()`), posteriors runs as its LoRA example "
         "(`model_to_function`, `extract_requires_grad_and_func`, `posteriors.torchopt` with "
         "`torchopt.adamw`, in place). Goals: bayesflow / floor ≤ 1.2, bayesflow / "
         "posteriors ≤ 1."),
        "",
    ]
    body = []
    for row in rows:
        found = row["contenders"]
        body.append([
            LABELS.get(row["subset"], row["subset"]), f"{row['d']:,}",
            " / ".join(_mib(found[name]["peak_bytes"]) for name in ("floor", "bayesflow", "posteriors")),
            f"{row['memory_ratio']:.2f} ({_status(row['memory_ratio'], 1.2)})",
            f"{row['posteriors_memory_ratio']:.2f} ({_status(row['posteriors_memory_ratio'], 1.0)})",
            " / ".join(f"{found[name]['interleaved_s'] * 1e3:,.0f}" for name in ("floor", "bayesflow", "posteriors")),
            f"{_paired(row['interleaved']['floor_ratio'])} ({_status(row['step_ratio'], 1.2)})",
            f"{_paired(row['interleaved']['posteriors_ratio'])} ({_status(row['posteriors_step_ratio'], 1.0)})",
            number(row["load_average"][0], "{:.1f}"),
        ])
    lines += table(
        ["subset", "d", "peak MiB floor / bayesflow / posteriors", "bayesflow / floor",
         "bayesflow / posteriors", "step ms floor / bayesflow / posteriors", "bayesflow / floor",
         "bayesflow / posteriors", "load"],
        body,
    )
    lines += [""] + chains_lines(results["chains"], results["device"])
    if results.get("gradient"):  # results files before the gradient part have none
        lines += [""] + gradient_lines(results["gradient"])
    return lines


def gradient_lines(found: list[dict[str, Any]]) -> list[str]:
    """The bytes each subset's problem adds and one gradient's milliseconds."""
    chains = found[0]["chains"]
    lines = [
        ("One gradient (median ms), in a fresh process per subset: the plain peft loop (the "
         "model's own tensors, every position's logits, `torch.autograd.grad`) against "
         f"bayesflow's chain gradient for one chain and for {chains} chains vmapped over the one "
         "frozen model (its ratio is to "
         f"{chains} plain gradients); the bytes of tensors the problem adds to the model "
         "(the start and what the prior binds) against the frozen weights' bytes."),
        "",
    ]
    body = [[
        LABELS.get(row["subset"], row["subset"]), f"{row['d']:,}",
        (f"{row['added_bytes'] / 2**10:,.0f} KiB "
         f"({row['added_bytes'] / max(row['frozen_bytes'], 1):.1%} of {row['frozen_bytes'] / MEBIBYTE:,.1f} MiB)"),
        f"{row['floor_ms']:,.1f}",
        f"{row['one_chain_ms']:,.1f} ({row['one_chain_ms'] / row['floor_ms']:.2f}×)",
        f"{row['chains_ms']:,.1f} ({row['chains_ms'] / (row['chains'] * row['floor_ms']):.2f}×)",
        number(row["load_average"][0], "{:.1f}"),
    ] for row in found]
    return lines + table(
        ["subset", "d", "bytes the problem adds", "plain peft ms", "bayesflow, 1 chain",
         f"{chains} chains vmapped", "load"],
        body,
    )


def chains_lines(chains: dict[str, Any], device: str) -> list[str]:
    """The parallel SGHMC row: its peak beside one frozen model plus K × (θ, momenta)."""
    return [
        (f"Parallel SGHMC, {chains['chains']} chains of the last layer (d = {chains['d']:,}), "
         f"{_memory_word(device)}: {_mib(chains['peak_bytes'])} MiB against one frozen model "
         f"({_mib(chains['built_bytes'])} MiB once built) + {chains['chains']} × (θ and momenta, "
         f"{_mib(chains['state_bytes'])} MiB) = {_mib(chains['expected_bytes'])} MiB: "
         f"{chains['memory_ratio']:.2f}× that sum; step {chains['step_s'] * 1e3:,.0f} ms "
         f"(load {chains['load_average'][0]:.1f}). The rest is each chain's gradient (the step "
         "works in place, the noise drawn into the gradient's buffer), its assembly from the "
         "layer's tensors' gradients, and each chain's activations of the trainable layer and "
         "the output head."),
    ]


def llm8b_section(results: dict[str, Any]) -> list[str]:
    """Llama 3 8B's shape on a GPU: 10 chains of SGHMC on the last layer."""
    chains = results["chains"]
    return [
        (f"### Llama 3 8B's shape, last layer, {chains['chains']} chains of SGHMC "
         f"({chains['parameters']:,} parameters, bfloat16, device `{results['device']}`)"),
        "",
    ] + chains_lines(chains, results["device"])
