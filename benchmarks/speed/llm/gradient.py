"""The ``llm`` case's gradient part: what a language-model subset problem adds to the model,
and the time of one gradient against plain torch + peft.

    python -m benchmarks.speed.llm.gradient                    # size `small`, both subsets
    python -m benchmarks.speed.llm.gradient --size quick --chains 10 --repeats 5

The model is a config-built Llama of a size of :data:`benchmarks.speed.llm.child.SIZES`
(``small`` by default: hidden 256, 8 layers, vocabulary 256, 8 windows of 64 tokens scoring
the last 16, the size docs/llm.md's gradient table reports), random weights, nothing
downloaded; the subsets are the case's (LoRA r 8, α 32 on q/k/o of the last layer; the
last decoder layer). Measured in one process:

- the bytes of tensors the problem adds to the model (the trainable start and whatever
  the prior binds), against the frozen weights' bytes: a copy of the model would add all
  of them;
- milliseconds per gradient (median after one warm-up call) of the floor, a plain peft
  loop (the model's own tensors, every position's logits, ``torch.autograd.grad``), and
  of bayesflow's chain gradient for one chain and for K chains vmapped over the one
  frozen model.

``python -m benchmarks.speed.run --cases llm`` runs this for both subsets at the case's
size, each in a fresh process (:mod:`benchmarks.speed.llm.case`), beside the peak memory
and the optimiser step of whole contenders.
"""

from __future__ import annotations

import argparse
import gc
import json
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional

from benchmarks.common.timing import time_once
from benchmarks.speed.llm.child import SIZES, SUBSETS, build_model, windows_of

__all__ = ["describe", "measure"]


def _live_bytes(device: str) -> dict[int, int]:
    """Storage pointer → bytes of every live tensor on ``device``."""
    gc.collect()
    kind = torch.device(device).type
    with warnings.catch_warnings():  # isinstance on every object touches deprecated ones
        warnings.simplefilter("ignore", FutureWarning)
        tensors = [t for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.device.type == kind]
    sizes = {}
    for tensor in tensors:
        try:  # a fake or functional tensor (left by an earlier torch.compile in the process) has no data
            sizes[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        except RuntimeError:
            continue
    return sizes


def _milliseconds(step: Callable[[], object], repeats: int, device: str) -> float:
    """Median wall time of ``step`` in ms, after one warm-up call."""
    step()
    times = sorted(time_once(step, device) for _ in range(repeats))
    return 1e3 * times[len(times) // 2]


def measure(subset: str, size: dict[str, int], device: str, chains: int = 10,
            repeats: int = 5) -> dict[str, Any]:
    """The bytes the problem adds and the milliseconds of one gradient, for ``subset``."""
    from bayesflow.engines.gradient import chain_gradient
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.priors import diag_normal

    torch.manual_seed(0)
    model, names = build_model(size, subset, device)
    values = dict(model.named_parameters())
    frozen = sum(value.numel() * value.element_size() for name, value in values.items() if name not in names)
    before = _live_bytes(device)
    windows, targets = windows_of(size, device)
    scored = size["scored"]
    problem = build_lm_problem(model, names, diag_normal(1.0), targets.numel(), scored, device)
    start = problem.init_params(torch.Generator(device=device).manual_seed(0)) + 0.01
    added = sum(nbytes for pointer, nbytes in _live_bytes(device).items()
                if pointer not in before and pointer != windows.untyped_storage().data_ptr()
                and pointer != targets.untyped_storage().data_ptr())
    gradient = chain_gradient(problem, 1.0)
    one = start.unsqueeze(0)
    many = start + 0.01 * torch.randn(chains, start.numel(), device=device)
    leaves = [values[name] for name in names]
    length = size["length"]

    def plain() -> None:  # the floor: the model's own tensors, every position's logits
        logits = model(windows, use_cache=False).logits[:, length - scored - 1 : -1].float()
        loss = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        torch.autograd.grad(loss, leaves)

    return {
        "subset": subset, "device": device, "chains": chains, "d": problem.dimension,
        "parameters": sum(value.numel() for value in values.values()), "frozen_bytes": frozen,
        "added_bytes": added,
        "floor_ms": _milliseconds(plain, repeats, device),
        "one_chain_ms": _milliseconds(lambda: gradient(one, (windows, targets)), repeats, device),
        "chains_ms": _milliseconds(lambda: gradient(many, (windows, targets)), max(1, repeats // 2), device),
    }


def describe(found: dict[str, Any]) -> str:
    """Two lines of text: the bytes added, and the gradient times with their ratios."""
    label = found["subset"].replace("_", " ")
    floor, ours, many, chains = found["floor_ms"], found["one_chain_ms"], found["chains_ms"], found["chains"]
    return (
        f"{label:10s} model {found['parameters']:,} parameters ({found['frozen_bytes'] / 2**20:.1f} MiB "
        f"frozen), trainable d = {found['d']:,}; problem adds {found['added_bytes'] / 2**10:.1f} KiB "
        f"({found['added_bytes'] / max(found['frozen_bytes'], 1):.2%} of the frozen bytes)\n"
        f"{'':10s} step ms: plain peft/torch {floor:.1f}, bayesflow 1 chain {ours:.1f} "
        f"({ours / floor:.2f}x), {chains} chains vmapped {many:.1f} "
        f"({many / (chains * floor):.2f}x of {chains} plain steps)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.llm.gradient",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--subsets", nargs="+", choices=SUBSETS, default=list(SUBSETS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--chains", type=int, default=10, help="chains of the vmapped gradient")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", action="store_true", help="one JSON line per subset, no text")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if not args.json:
        print(f"torch threads {torch.get_num_threads()}")
    for subset in args.subsets:
        found = measure(subset, SIZES[args.size], args.device, args.chains, args.repeats)
        print(json.dumps(found) if args.json else describe(found))


if __name__ == "__main__":
    main()
