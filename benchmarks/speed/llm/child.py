"""``python -m benchmarks.speed.llm.child CONTENDER SUBSET SIZE DEVICE [--chains K]``: one
contender of the ``llm`` case in this (fresh) process; prints one JSON line. With
``CONTENDER`` ``interleaved``: the floor, bayesflow and posteriors on one model in this
process, timed interleaved (:func:`benchmarks.common.timing.compare`, the order rotated every
repeat), for step ratios that one moment of the machine's load does not tilt.

The model is built (a config-built Llama, random weights, nothing downloaded), then the
contender's step is made, run ``warmup`` times untimed and ``steps`` times timed (each
step synchronised on a GPU). Memory: on the CPU the peak resident set of the process
(``ru_maxrss``: the model, its build and every step; the same build in every contender),
on a GPU ``torch.cuda.max_memory_allocated`` over the whole process. ``built_bytes`` is
the same figure right after the model and the batch were made.

Contenders, on the same model, windows and scored tokens, AdamW at one learning rate:

- ``floor``: a plain torch + peft loop: the model's own trainable tensors, one forward
  (``logits_to_keep``: only the scored positions' logits, as bayesflow), the mean token
  cross-entropy, ``backward()``, ``torch.optim.AdamW``;
- ``bayesflow``: the ``map`` engine (AdamW) on :func:`bayesflow.llm.problem.build_lm_problem`
  with a N(0, 1) prior;
- ``posteriors``: posteriors 0.1.3 as its LoRA example drives it:
  ``posteriors.model_to_function(model)``, ``extract_requires_grad_and_func`` over the
  model's named parameters, the log posterior mean log-likelihood + log prior / N
  (``diag_normal_log_prob``, sd 1), ``posteriors.torchopt.build`` with ``torchopt.adamw``,
  ``update(..., inplace=True)`` (its faster form);
- ``sghmc``: bayesflow's ``sghmc`` with ``chains: K`` (one (K, d) state over the one frozen
  model), ``keep: last``.
"""

from __future__ import annotations

import argparse
import json
import resource
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn import functional

from benchmarks.common.timing import time_once

__all__ = ["LLAMA3_8B", "SIZES", "SUBSETS", "build_model", "child_arguments", "interleaved", "measure",
           "windows_of"]

# Model and batch of each size: hidden width, decoder layers, heads, vocabulary, and the
# windows (count, tokens each, scored tokens at the end of each).
SIZES: dict[str, dict[str, int]] = {
    "smoke": {"hidden": 32, "layers": 2, "heads": 2, "vocab": 64, "windows": 2, "length": 16, "scored": 4},
    "quick": {"hidden": 256, "layers": 4, "heads": 4, "vocab": 2048, "windows": 4, "length": 64, "scored": 16},
    # 144.8M parameters, as docs/llm.md measured: at least 100M frozen (issue 23).
    "full": {"hidden": 768, "layers": 14, "heads": 4, "vocab": 8192, "windows": 4, "length": 64, "scored": 16},
    # The gradient table of docs/llm.md (python -m benchmarks.speed.llm.gradient's default).
    "small": {"hidden": 256, "layers": 8, "heads": 4, "vocab": 256, "windows": 8, "length": 64, "scored": 16},
}
# Llama 3 8B's shape (random weights, bfloat16, built on the device): the paper's last
# layer is 218,112,000 parameters; windows of 300 tokens scoring the last 50, as there.
LLAMA3_8B = {"hidden": 4096, "intermediate": 14336, "layers": 32, "heads": 32, "kv_heads": 8,
             "vocab": 128256, "windows": 2, "length": 300, "scored": 50}
# The same code path at a size a CPU test runs (four query heads per key-value head).
SIZES["llama3_8b"] = LLAMA3_8B
SIZES["llama3_8b_scaled"] = {"hidden": 64, "intermediate": 224, "layers": 2, "heads": 4, "kv_heads": 1,
                             "vocab": 512, "windows": 2, "length": 24, "scored": 6}
# SmolLM2-135M's shape (issue 31; random float32 weights, nothing downloaded): 134,515,008
# parameters, the output layer tied to the embeddings; windows of 64 tokens scoring 32.
# ``bits``: the weights' float width (bfloat16 unless given), ``tied``: 1 ties them.
SIZES["smollm2"] = {"hidden": 576, "intermediate": 1536, "layers": 30, "heads": 9, "kv_heads": 3,
                    "vocab": 49152, "windows": 8, "length": 64, "scored": 32,
                    "rope_theta": 100000, "tied": 1, "bits": 32}
SUBSETS = ("lora", "last_layer")
LEARNING_RATE = 1e-4


def build_model(size: dict[str, int], subset: str, device: str,
                trainable: dict[str, Any] | None = None) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """The model and its trainable tensors' names: through bayesflow's ``causal_lm``
    builder then moved to ``device``; shapes with key-value heads (Llama 3, SmolLM2) built
    directly on ``device`` (no CPU copy of 16 GB first), in bfloat16 unless the size gives
    ``bits: 32``. ``trainable`` (a ``model.trainable`` spec) replaces ``subset``'s."""
    from bayesflow.llm import build_causal_lm
    from bayesflow.spec.llm import TrainableSpec

    layers = size["layers"]
    if trainable is None:
        trainable = (
            {"lora": {"r": 8, "alpha": 32, "target_modules": ["q_proj", "k_proj", "o_proj"], "layers": [-1]}}
            if subset == "lora" else {"parameters": [f"model.layers.{layers - 1}.*"]}
        )
    if "kv_heads" not in size:
        model, names = build_causal_lm({
            "name": "causal_lm", "family": "llama", "vocab_size": size["vocab"],
            "hidden_size": size["hidden"], "layers": layers, "heads": size["heads"],
            "context": size["length"], "trainable": trainable,
        })
        return model.to(device), names
    import transformers

    from bayesflow.llm.trainable import apply_trainable

    # Eager attention: it batches over chains under vmap (bayesflow.llm.source).
    settings: dict[str, Any] = {
        "hidden_size": size["hidden"], "intermediate_size": size["intermediate"],
        "num_hidden_layers": layers, "num_attention_heads": size["heads"],
        "num_key_value_heads": size["kv_heads"], "vocab_size": size["vocab"],
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(size.get("rope_theta", 500000))},
        "tie_word_embeddings": bool(size.get("tied", 0)), "attn_implementation": "eager",
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    config = transformers.LlamaConfig(**settings)
    dtype = torch.float32 if size.get("bits") == 32 else torch.bfloat16
    with torch.device(device), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    return apply_trainable(model, TrainableSpec.model_validate(trainable))


def _floor(model: torch.nn.Module, names: tuple[str, ...], batch: tuple[torch.Tensor, torch.Tensor],
           scored: int) -> Callable[[], None]:
    windows, targets = batch
    leaves = [dict(model.named_parameters())[name] for name in names]
    optimizer = torch.optim.AdamW(leaves, lr=LEARNING_RATE, weight_decay=0.0)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(windows, use_cache=False, logits_to_keep=scored + 1).logits[:, :-1].float()
        functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
        optimizer.step()

    return step


def _bayesflow(model: torch.nn.Module, names: tuple[str, ...], batch: tuple[torch.Tensor, torch.Tensor],
               scored: int, chains: int | None, problem: Any = None) -> Callable[..., None]:
    """bayesflow's step on ``problem`` (default: :func:`build_lm_problem` of the model, a
    N(0, 1) prior); the step takes ``batch`` unless given another."""
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.methods import METHODS
    from bayesflow.priors import diag_normal
    from bayesflow.temperature import Tempering

    device = batch[0].device
    if problem is None:
        problem = build_lm_problem(model, names, diag_normal(1.0), batch[1].numel(), scored, device)
    if chains is not None:  # SGHMC of K chains (K = 1 too); None: MAP with AdamW
        name, settings = "sghmc", {"chains": chains, "lr": 1e-6, "keep": "last"}
    else:
        name, settings = "map", {"optimizer": {"name": "adamw", "lr": LEARNING_RATE, "weight_decay": 0.0}}
    method = METHODS.get(name)
    spec = method.spec.model_validate({"engine": name, "batch_size": None, **settings})
    engine = method.builder()(problem, Tempering(1.0, problem.num_data), spec)
    generator = torch.Generator(device=device).manual_seed(0)
    holder = [engine.init(problem.init_params(generator), generator)]

    def step(data: tuple[torch.Tensor, torch.Tensor] = batch) -> None:
        holder[0], _ = engine.update(holder[0], data)

    return step


def _posteriors(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], scored: int) -> Callable[[], None]:
    import posteriors
    import torchopt

    from benchmarks.common.peers import fresh

    windows, targets = batch
    count = targets.numel()
    model_function = posteriors.model_to_function(model)

    def log_likelihood(params: dict[str, torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits = model_function(params, batch[0], use_cache=False, logits_to_keep=scored + 1).logits
        logits = logits[:, :-1].float()
        return -functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[1].reshape(-1))

    sub_params, sub_log_likelihood = posteriors.extract_requires_grad_and_func(
        dict(model.named_parameters()), log_likelihood
    )

    def loss(params: dict[str, torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        log_posterior = sub_log_likelihood(params, batch) + posteriors.diag_normal_log_prob(
            params, sd_diag=1.0, normalize=False
        ) / count
        return -log_posterior, log_posterior.detach()

    transform = posteriors.torchopt.build(loss, torchopt.adamw(LEARNING_RATE))
    holder = [fresh(transform.init(sub_params))]

    def step() -> None:
        holder[0], _ = transform.update(holder[0], (windows, targets), inplace=True)

    return step


def _peak(device: str) -> int:
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def windows_of(size: dict[str, int], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The token windows and their scored tokens (the same in every contender)."""
    generator = torch.Generator().manual_seed(1)
    windows = torch.randint(0, size["vocab"], (size["windows"], size["length"]), generator=generator)
    return windows.to(device), windows[:, -size["scored"]:].to(device)


def interleaved(subset: str, size: dict[str, int], device: str, repeats: int = 5) -> dict[str, Any]:
    """The three MAP contenders' steps on one model, timed interleaved: seconds per step
    of each and the paired ratios bayesflow / floor and bayesflow / posteriors. (They
    share the model: the floor and posteriors step its own trainable tensors, bayesflow
    its state; the work per step is the same whatever the values.)"""
    from benchmarks.common.timing import Settings, compare, paired_ratio

    model, names = build_model(size, subset, device)
    batch = windows_of(size, device)
    steps = {"floor": _floor(model, names, batch, size["scored"]),
             "bayesflow": _bayesflow(model, names, batch, size["scored"], None),
             "posteriors": _posteriors(model, batch, size["scored"])}
    timings = compare(steps, Settings("quick", device), count=1, warmup=1, repeats=repeats)
    return {
        "subset": subset, "timings": {name: timing.as_dict() for name, timing in timings.items()},
        "floor_ratio": paired_ratio(timings["bayesflow"], timings["floor"]),
        "posteriors_ratio": paired_ratio(timings["bayesflow"], timings["posteriors"]),
    }


def measure(contender: str, subset: str, size: dict[str, int], device: str, chains: int = 1,
            warmup: int = 1, steps: int = 3) -> dict[str, Any]:
    """Build, step and measure one contender in this process (see the module docstring)."""
    model, names = build_model(size, subset, device)
    batch = windows_of(size, device)
    values = dict(model.named_parameters())
    trainable = sum(values[name].numel() for name in names)
    frozen = [value for name, value in values.items() if name not in names]
    built = _peak(device)
    if contender == "floor":
        step = _floor(model, names, batch, size["scored"])
    elif contender == "posteriors":
        step = _posteriors(model, batch, size["scored"])
    else:
        step = _bayesflow(model, names, batch, size["scored"], chains if contender == "sghmc" else None)
    for _ in range(warmup):
        step()
    seconds = [time_once(step, device) for _ in range(steps)]
    return {
        "contender": contender, "subset": subset, "device": device, "chains": chains,
        "parameters": sum(value.numel() for value in values.values()),
        "frozen_parameters": sum(value.numel() for value in frozen),
        "frozen_bytes": sum(value.numel() * value.element_size() for value in frozen),
        "d": trainable, "built_bytes": built, "peak_bytes": _peak(device), "seconds": seconds,
    }


def child_arguments(doc: str, contenders: Sequence[str], subsets: Sequence[str], sizes: Sequence[str],
                    argv: list[str] | None, steps: int = 3, **extra: int) -> argparse.Namespace:
    """A child's command line, ``CONTENDER SUBSET SIZE DEVICE [--chains K] [--warmup W]
    [--steps S] [--threads T]`` and an integer option per ``extra`` (its default), parsed;
    torch's threads set to ``--threads``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("contender", choices=contenders)
    parser.add_argument("subset", choices=subsets)
    parser.add_argument("size", choices=sizes)
    parser.add_argument("device")
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--threads", type=int, default=1)
    for name, default in extra.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args


def main(argv: list[str] | None = None) -> None:
    args = child_arguments(__doc__, ("floor", "bayesflow", "posteriors", "sghmc", "interleaved"), SUBSETS,
                           list(SIZES), argv)
    if args.contender == "interleaved":
        print(json.dumps(interleaved(args.subset, SIZES[args.size], args.device, args.steps)))
        return
    result = measure(args.contender, args.subset, SIZES[args.size], args.device, args.chains,
                     args.warmup, args.steps)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
