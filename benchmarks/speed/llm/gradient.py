"""Memory and step time of a language-model subset problem against plain torch + peft.

    PYTHONPATH=. python -m benchmarks.speed.llm.gradient [--hidden 256 --layers 8 --chains 10]

A config-built Llama (random weights, nothing downloaded), LoRA r = 8, α = 32 on q/k/o of
the last layer, or the last decoder layer. Reported side by side in one process:

- the bytes of tensors the problem adds to the model (the trainable start, the prior's
  vectors), against the frozen weights' bytes: a copy of the model would add all of them;
- milliseconds per gradient step of bayesflow's chain gradient (one chain, and K chains
  vmapped over one shared frozen model) against the floor, a plain peft loop (the model's
  own tensors, ``loss.backward()``, once per chain).

Peak memory and the step of a whole MAP or SGHMC fit, against the floor and posteriors,
each in a fresh process, are the ``llm`` case of ``python -m benchmarks.speed.run --cases llm``
(:mod:`benchmarks.speed.llm`). docs/llm.md quotes both.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import torch
from torch.nn import functional

from bayesflow.engines.gradient import chain_gradient
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.priors import diag_normal


def live_bytes() -> dict[int, int]:
    """Storage pointer → bytes of every live CPU tensor."""
    gc.collect()
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in gc.get_objects()
            if isinstance(t, torch.Tensor) and t.device.type == "cpu"}


def milliseconds(step: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``step`` in ms (after one warm-up call)."""
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[len(times) // 2]


def case(trainable: dict, args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    model, names = build_causal_lm(model_config(trainable, args))
    total = sum(p.numel() for p in model.parameters())
    frozen = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n not in names)
    before = live_bytes()
    scored = args.length // 4
    problem = build_lm_problem(model, names, diag_normal(1.0), args.windows * scored, scored)
    start = problem.init_params(torch.Generator().manual_seed(0)) + 0.01
    added = sum(size for ptr, size in live_bytes().items() if ptr not in before)
    windows = torch.randint(0, args.vocab, (args.windows, args.length), generator=torch.Generator().manual_seed(1))
    batch = (windows, windows[:, -scored:])
    gradient = chain_gradient(problem, 1.0)
    one = start.unsqueeze(0)
    chains = start + 0.01 * torch.randn(args.chains, start.numel())
    leaves = [dict(model.named_parameters())[n] for n in names]

    def plain() -> None:  # the floor: the model's own tensors and autograd
        logits = model(windows, use_cache=False).logits[:, args.length - scored - 1 : -1]
        loss = functional.cross_entropy(logits.reshape(-1, args.vocab), batch[1].reshape(-1))
        torch.autograd.grad(loss, leaves)

    floor = milliseconds(plain, args.repeats)
    ours = milliseconds(lambda: gradient(one, batch), args.repeats)
    many = milliseconds(lambda: gradient(chains, batch), max(1, args.repeats // 2))
    label = "lora" if "lora" in trainable else "last layer"
    print(f"{label:10s} model {total:,} parameters ({frozen / 2**20:.1f} MiB frozen), trainable "
          f"d = {problem.dimension:,}; problem adds {added / 2**10:.1f} KiB "
          f"({added / max(frozen, 1):.2%} of the frozen bytes)")
    print(f"{'':10s} step ms: plain peft/torch {floor:.1f}, bayesflow 1 chain {ours:.1f} "
          f"({ours / floor:.2f}x), {args.chains} chains vmapped {many:.1f} "
          f"({many / (args.chains * floor):.2f}x of {args.chains} plain steps)")


def model_config(trainable: dict, args: argparse.Namespace) -> dict:
    return {"name": "causal_lm", "family": "llama", "vocab_size": args.vocab, "hidden_size": args.hidden,
            "layers": args.layers, "heads": 4, "context": args.length, "trainable": trainable}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--chains", type=int, default=10, help="chains of the vmapped gradient")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=256)
    args = parser.parse_args()
    print(f"torch threads {torch.get_num_threads()}")
    case({"lora": {"r": 8, "alpha": 32, "target_modules": ["q_proj", "k_proj", "o_proj"], "layers": [-1]}}, args)
    case({"parameters": [f"model.layers.{args.layers - 1}.*"]}, args)


if __name__ == "__main__":
    main()
