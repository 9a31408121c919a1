"""Memory and step time of a language-model subset problem against plain torch + peft.

    PYTHONPATH=. python -m benchmarks.llm_subset [--hidden 256 --layers 8 --chains 10]

A config-built Llama (random weights, nothing downloaded), LoRA r = 8, α = 32 on q/k/o of
the last layer, or the last decoder layer. Reported side by side in one process:

- the bytes of tensors the problem adds to the model (the trainable start, the prior's
  vectors), against the frozen weights' bytes: a copy of the model would add all of them;
- milliseconds per gradient step of bayesflow's chain gradient (one chain, and K chains
  vmapped over one shared frozen model) against the floor, a plain peft loop (the model's
  own tensors, ``loss.backward()``, once per chain).

With ``--memory`` it instead runs each (subset, loop) pair in a fresh process and reports
the peak resident memory (``ru_maxrss``) and the median step time of a MAP step with AdamW:
bayesflow's ``map`` engine against a plain torch + peft loop (``torch.optim.AdamW`` on the
model's own trainable tensors) on the same model and batch:

    PYTHONPATH=. python -m benchmarks.llm_subset --memory --hidden 768 --layers 14 --vocab 8192

Not part of ``benchmarks.run``'s cases (yet); docs/llm.md quotes a run.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
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


def memory_child(args: argparse.Namespace) -> None:
    """One (subset, loop) pair in this process: prints JSON with peak RSS and step ms."""
    from bayesflow.methods import METHODS
    from bayesflow.temperature import Tempering

    trainable = json.loads(args.child_trainable)
    model, names = build_causal_lm(model_config(trainable, args))
    scored = args.length // 4
    windows = torch.randint(0, args.vocab, (args.windows, args.length), generator=torch.Generator().manual_seed(1))
    batch = (windows, windows[:, -scored:])
    built_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.child_loop == "plain":
        leaves = [dict(model.named_parameters())[n] for n in names]
        optimizer = torch.optim.AdamW(leaves, lr=1e-4, weight_decay=0.0)

        def step() -> None:
            optimizer.zero_grad()
            logits = model(windows, use_cache=False).logits[:, args.length - scored - 1 : -1]
            functional.cross_entropy(logits.reshape(-1, args.vocab), batch[1].reshape(-1)).backward()
            optimizer.step()
    else:
        problem = build_lm_problem(model, names, diag_normal(1.0), args.windows * scored, scored)
        if args.child_loop == "sghmc":
            name, settings = "sghmc", {"chains": args.chains, "lr": 1e-6, "keep": "last"}
        else:
            name, settings = "map", {"optimizer": {"name": "adamw", "lr": 1e-4, "weight_decay": 0.0}}
        spec = METHODS.get(name).spec.model_validate({"engine": name, "batch_size": None, **settings})
        engine = METHODS.get(name).builder()(problem, Tempering(1.0, problem.num_data), spec)
        holder = [engine.init(problem.init_params(torch.Generator().manual_seed(0)), torch.Generator())]

        def step() -> None:
            holder[0], _ = engine.update(holder[0], batch)
    ms = milliseconds(step, args.repeats)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": peak / 1024, "built_mib": built_rss / 1024, "ms": ms,
                      "parameters": sum(p.numel() for p in model.parameters()), "d": sum(
                          dict(model.named_parameters())[n].numel() for n in names)}))


def memory(args: argparse.Namespace) -> None:
    """Each subset and loop in a fresh process, side by side."""
    subsets = {"lora": {"lora": {"r": 8, "alpha": 32, "target_modules": ["q_proj", "k_proj", "o_proj"],
                                 "layers": [-1]}},
               "last layer": {"parameters": [f"model.layers.{args.layers - 1}.*"]}}
    for label, trainable in subsets.items():
        found = {}
        for loop in ("plain", "bayesflow"):
            command = [sys.executable, "-m", "benchmarks.llm_subset", "--child-loop", loop,
                       "--child-trainable", json.dumps(trainable)] + [
                f"--{key}={getattr(args, key)}" for key in ("hidden", "layers", "length", "windows", "repeats", "vocab")]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            found[loop] = json.loads(output.strip().splitlines()[-1])
        if args.chains > 1:
            command[4] = "sghmc"
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            chains = json.loads(output.strip().splitlines()[-1])
            state = 3 * args.chains * chains["d"] * 4 / 2**20  # positions, momenta, gradients
            print(f"{label:10s} SGHMC {args.chains} chains: peak RSS {chains['peak_mib']:.0f} MiB, "
                  f"{chains['peak_mib'] - chains['built_mib']:.0f} MiB above the built model "
                  f"(the chains' positions, momenta and gradients: {state:.0f} MiB); step "
                  f"{chains['ms']:.0f} ms")
        plain, ours = found["plain"], found["bayesflow"]
        print(f"{label:10s} {plain['parameters']:,} parameters, d = {plain['d']:,}: peak RSS plain "
              f"{plain['peak_mib']:.0f} MiB, bayesflow {ours['peak_mib']:.0f} MiB "
              f"({ours['peak_mib'] / plain['peak_mib']:.2f}x; after building {plain['built_mib']:.0f} / "
              f"{ours['built_mib']:.0f}); MAP AdamW step plain {plain['ms']:.0f} ms, bayesflow "
              f"{ours['ms']:.0f} ms ({ours['ms'] / plain['ms']:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--chains", type=int, default=10, help="chains (--memory: an SGHMC case; 1: none)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--memory", action="store_true", help="peak memory and MAP step, per process")
    parser.add_argument("--child-loop", help=argparse.SUPPRESS)
    parser.add_argument("--child-trainable", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_loop:
        return memory_child(args)
    if args.memory:
        return memory(args)
    print(f"torch threads {torch.get_num_threads()}")
    case({"lora": {"r": 8, "alpha": 32, "target_modules": ["q_proj", "k_proj", "o_proj"], "layers": [-1]}}, args)
    case({"parameters": [f"model.layers.{args.layers - 1}.*"]}, args)


if __name__ == "__main__":
    main()
