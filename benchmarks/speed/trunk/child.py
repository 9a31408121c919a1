"""``python -m benchmarks.speed.trunk.child CONTENDER SUBSET SIZE DEVICE [--chains K]``: one
contender of the ``trunk`` case in this (fresh) process; prints one JSON line.

The model is SmolLM2-135M's shape built from its config (:data:`SIZES`; random float32
weights, nothing downloaded), its trainable subset the last decoder layer or LoRA on it
(:data:`TRAINABLE`). Every contender steps bayesflow's ``sghmc`` engine as
:func:`benchmarks.speed.llm.child._bayesflow` drives it (full batch, ``keep: last``, lr 1e-6),
all chains on the same windows:

- ``one_chain``: 1 chain, the shared trunk (``build_lm_problem(..., share_trunk=True)``);
- ``chains``: K chains vmapped over the one model, the shared trunk;
- ``chains_whole``: K chains vmapped, the whole forward (``share_trunk=False``: the before);
- ``members``: K single-chain engines stepped one after another on the whole forward, as
  posteriors' Bayesian Llama example trains its ten members: one "step" is K steps.

Two regimes, each step timed alone after ``warmup`` untimed steps: ``new``, fresh windows
every step (a fit's first epoch); ``seen``, steps cycling through :data:`CYCLED` batches an
earlier pass has met (later epochs: the shared trunk reads their hidden states back; the
pass is the trunk's own, which keeps them as an epoch of steps would, without the chains'
steps; the whole-forward contenders keep nothing, so their ``seen`` steps are the same work
as ``new``). Memory: the process's peak resident set (``ru_maxrss``; on a
GPU ``torch.cuda.max_memory_allocated``), and ``built_bytes`` the same right after the model
was built.

``scoring``: the last words of ``--statements`` random statements of 12 to 20 tokens scored
by :func:`bayesflow.llm.statement_scores.score_statements` (what the evaluate stage calls)
under 1 member and under K, on the shared trunk and on the whole forward: the first call
on a fresh problem (nothing kept), then the same call again (the shared trunk reads every
statement back).
"""

from __future__ import annotations

import inspect
import json
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks.common.timing import time_once
from benchmarks.speed.llm.child import SIZES as LLM_SIZES
from benchmarks.speed.llm.child import _bayesflow, _peak, build_model, child_arguments

__all__ = ["CONTENDERS", "CYCLED", "SIZES", "STATEMENTS", "TRAINABLE", "measure", "score"]

SMOLLM2 = LLM_SIZES["smollm2"]
# full: SmolLM2-135M's shape; quick: its first 6 layers' worth (the same widths);
# smoke: a tiny model of the same kind (key-value heads, tied output layer), for the tests.
SIZES: dict[str, dict[str, int]] = {
    "full": SMOLLM2,
    "quick": {**SMOLLM2, "layers": 6},
    "smoke": {**SMOLLM2, "hidden": 32, "intermediate": 64, "layers": 3, "heads": 4, "kv_heads": 2,
              "vocab": 128, "windows": 2, "length": 16, "scored": 4},
}
# The subsets (issue 31, item 4): model.trainable specs, given the layer count.
TRAINABLE: dict[str, Callable[[int], dict[str, Any]]] = {
    "last_layer": lambda layers: {"parameters": [f"model.layers.{layers - 1}.*"]},
    "lora": lambda layers: {"lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"],
                                     "layers": [-1]}},
}
CONTENDERS = ("one_chain", "chains", "chains_whole", "members")
# Batches the "seen" regime cycles through, and the statements the scoring reads (issue 31:
# 100 short windows).
CYCLED = 4
STATEMENTS = 100

Batch = tuple[torch.Tensor, torch.Tensor]


def problem_of(model: torch.nn.Module, names: tuple[str, ...], size: dict[str, int], device: str,
               share_trunk: bool) -> Any:
    """The language-model problem of ``model`` with a N(0, 1) prior, its trunk shared or not;
    nothing kept from an earlier problem of this process (each contender starts fresh)."""
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.llm.trunk import forget_kept
    from bayesflow.priors import diag_normal

    forget_kept()
    scored = size["scored"]
    return build_lm_problem(model, names, diag_normal(1.0), size["windows"] * scored, scored, device,
                            share_trunk=share_trunk)


def trunk_of(problem: Any) -> Any:
    """The problem's :class:`bayesflow.llm.trunk.Trunk` (None: the whole forward). The
    problem does not expose it; its logits function holds it, so read it there."""
    return inspect.getclosurevars(problem.logits).nonlocals.get("trunk")


def new_windows(size: dict[str, int], device: str, seed: int) -> Callable[[], Batch]:
    """A call returning windows never drawn before (and their scored tokens) each time."""
    generator = torch.Generator().manual_seed(seed)

    def draw() -> Batch:
        windows = torch.randint(0, size["vocab"], (size["windows"], size["length"]), generator=generator)
        return windows.to(device), windows[:, -size["scored"]:].to(device)

    return draw


def stepper(contender: str, model: torch.nn.Module, names: tuple[str, ...], size: dict[str, int],
            device: str, chains: int, batch: Batch) -> tuple[Callable[[Batch], None], Any]:
    """The contender's step on a batch, and its problem."""
    share = contender in ("one_chain", "chains")
    problem = problem_of(model, names, size, device, share)
    scored = size["scored"]
    if contender != "members":
        count = 1 if contender == "one_chain" else chains
        return _bayesflow(model, names, batch, scored, count, problem), problem
    members = [_bayesflow(model, names, batch, scored, 1, problem) for _ in range(chains)]

    def step(data: Batch) -> None:
        for member in members:
            member(data)

    return step, problem


def _timed(step: Callable[[Batch], None], batches: list[Batch], device: str) -> list[float]:
    return [time_once(lambda batch=batch: step(batch), device) for batch in batches]


def _counted(trunk: Any) -> int:
    return 0 if trunk is None else int(trunk.computed)


def measure(contender: str, subset: str, size: dict[str, int], device: str, chains: int = 10,
            warmup: int = 1, steps: int = 2) -> dict[str, Any]:
    """Build, step and measure one contender in this process (see the module docstring)."""
    model, names = build_model(size, subset, device, TRAINABLE[subset](size["layers"]))
    values = dict(model.named_parameters())  # the tied output layer once
    frozen = [value for name, value in values.items() if name not in names]
    built = _peak(device)
    draw = new_windows(size, device, seed=2)
    step, problem = stepper(contender, model, names, size, device, chains, draw())
    trunk = trunk_of(problem)
    for _ in range(warmup):
        step(draw())
    began = _counted(trunk)
    new = _timed(step, [draw() for _ in range(steps)], device)
    computed_new = _counted(trunk) - began
    cycled = [draw() for _ in range(CYCLED)]
    if trunk is not None:  # an earlier epoch's pass keeps their hidden states (no need to step)
        for windows, _ in cycled:
            trunk.entered(windows)
    began = _counted(trunk)
    seen = _timed(step, [cycled[index % CYCLED] for index in range(steps)], device)
    per_window = size["length"] * size["hidden"] * frozen[0].element_size()
    return {
        "contender": contender, "subset": subset, "device": device, "chains": chains,
        "shared_trunk": trunk is not None, "trunk_start": None if trunk is None else trunk.start,
        "parameters": sum(value.numel() for value in values.values()),
        "frozen_parameters": sum(value.numel() for value in frozen),
        "frozen_bytes": sum(value.numel() * value.element_size() for value in frozen),
        "d": problem.dimension, "built_bytes": built, "peak_bytes": _peak(device),
        "seconds": {"new": new, "seen": seen},
        "step_s": {"new": statistics.median(new), "seen": statistics.median(seen)},
        # windows run through the trunk while timed: the batch's each step when new, none when seen
        "computed": {"new": computed_new, "seen": _counted(trunk) - began},
        # every window run through the trunk is kept (a quarter of the memory budget holds thousands)
        "kept_bytes": _counted(trunk) * per_window,
    }


def statements(size: dict[str, int], count: int = STATEMENTS, seed: int = 3) -> list[Any]:
    """``count`` random statements of 12 to 20 tokens whose last 1 to 3 tokens are the word."""
    from bayesflow.llm.statements import EncodedStatement

    generator = np.random.default_rng(seed)
    found = []
    for _ in range(count):
        length = int(generator.integers(12, 21))
        tokens = generator.integers(0, size["vocab"], length).astype(np.int64)
        found.append(EncodedStatement(tokens, length - int(generator.integers(1, 4))))
    return found


def score(subset: str, size: dict[str, int], device: str, chains: int = 10, repeats: int = 2,
          count: int = STATEMENTS) -> dict[str, Any]:
    """Seconds of scoring ``count`` statements under 1 and K members, on the shared trunk and
    on the whole forward: the first call on a fresh problem and the call again."""
    from bayesflow.llm.statement_scores import score_statements

    model, names = build_model(size, subset, device, TRAINABLE[subset](size["layers"]))
    rows = statements(size, count)
    start = problem_of(model, names, size, device, False).init_params(torch.Generator().manual_seed(0))
    noise = torch.randn((chains, start.numel()), generator=torch.Generator().manual_seed(1))
    members = start.unsqueeze(0) + 1e-3 * noise.to(start)  # K members apart
    found: dict[str, Any] = {}
    scores: dict[bool, np.ndarray] = {}
    for share in (True, False):
        for used in (members[:1], members):
            problem = problem_of(model, names, size, device, share)
            trunk = trunk_of(problem)
            last: list[Any] = []

            def call(problem: Any = problem, used: torch.Tensor = used, last: list[Any] = last) -> None:
                last[:] = [score_statements(problem, used, rows)]

            first = time_once(call, device)
            computed = _counted(trunk)
            again = [time_once(call, device) for _ in range(repeats)]
            found[f"{'shared' if share else 'whole'}_{used.shape[0]}"] = {
                "members": used.shape[0], "shared_trunk": trunk is not None, "first_s": first,
                "again_s": statistics.median(again), "again_seconds": again,
                "computed": {"first": computed, "again": _counted(trunk) - computed},
            }
        scores[share] = last[0].log_prob  # the K members' (the last scored)
    difference = float(np.abs(scores[True] - scores[False]).max())
    return {"subset": subset, "statements": len(rows), "chains": chains, "timings": found,
            "max_log_prob_difference": difference}


def main(argv: list[str] | None = None) -> None:
    args = child_arguments(__doc__, (*CONTENDERS, "scoring"), list(TRAINABLE), list(SIZES), argv, steps=2,
                           statements=STATEMENTS)
    size = SIZES[args.size]
    if args.contender == "scoring":
        result = score(args.subset, size, args.device, args.chains, args.steps, args.statements)
    else:
        result = measure(args.contender, args.subset, size, args.device, args.chains, args.warmup, args.steps)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
