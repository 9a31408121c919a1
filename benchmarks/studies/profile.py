"""Where bayesflow's step time goes, and what the proposed fixes would buy.

    python -m benchmarks.studies.profile            # Markdown on stdout (about 2 minutes)

Not part of ``benchmarks.speed.run``: this prototypes changes to the engines outside them, to
size each proposed fix before anyone edits ``bayesflow/engines``:

1. **Hot spots**: cProfile of ``engine.update`` (Python) and torch.profiler (operators)
   for single-chain SGHMC on Pima and for 1,000 chains.
2. **SGHMC step variants** on Pima, full batch, one chain: the engine as it is; its update
   without ``vmap`` over the one chain; with ``torch.autograd.grad`` instead of
   ``torch.func``; with the gradient compiled by ``torch.compile`` (inductor; needs a C++
   compiler on a CPU) and an in-place update; posteriors.
3. **VI step variants**: the engine; one reparameterised draw without ``vmap`` (what
   posteriors does for ``n_samples = 1``); that gradient compiled; posteriors.
4. **Chains**: the vectorised step at K = 100 and 1,000 (full batch) and 10,000
   (batch 32) with and without a compiled gradient, and the compile time.
5. **Chain starts**: ``problem.init_params`` per chain, and seeded with
   ``torch.default_generator.manual_seed`` instead of ``torch.manual_seed``.
"""

from __future__ import annotations

import cProfile
import io
import math
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.func import grad_and_value, vmap

from benchmarks.common.peers import (
    Stepper,
    bayesflow_engine,
    bayesflow_state,
    peer_state,
    peer_transform,
)
from benchmarks.common.problems import Setup, minibatch_list, pima
from benchmarks.common.timing import Settings, compare

__all__ = ["main"]

GradientFn = Callable[..., Any]


class FusedSGHMC:
    """The SGHMC update of the engine with in-place, fused element-wise operations."""

    def __init__(
        self,
        gradient: GradientFn,
        params: torch.Tensor,
        momenta: torch.Tensor,
        batches: list[Any],
        per_datum: float,
    ) -> None:
        self.gradient, self.batches, self.position = gradient, batches, 0
        self.params, self.momenta = params.clone(), momenta.clone()
        self.lr, self.alpha = 0.1, 1.0
        self.scale = math.sqrt(self.lr * 2 * self.alpha * per_datum)
        self.generator = torch.Generator().manual_seed(0)

    def __call__(self) -> None:
        batch = self.batches[self.position]
        self.position = (self.position + 1) % len(self.batches)
        grads, _ = self.gradient(self.params, batch)
        noise = torch.randn(self.momenta.shape, generator=self.generator)
        self.params.add_(self.momenta, alpha=self.lr)
        self.momenta.mul_(1 - self.lr * self.alpha).add_(grads, alpha=self.lr)
        self.momenta.add_(noise, alpha=self.scale)


def python_hot_spots(call: Callable[[], None], steps: int, rows: int = 12) -> str:
    """cProfile of ``steps`` calls, sorted by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(rows)
    return out.getvalue()


def operator_hot_spots(call: Callable[[], None], steps: int, rows: int = 10) -> str:
    """torch.profiler of ``steps`` calls, operators sorted by own CPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            call()
    return str(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def compiled(function: GradientFn, *example: Any) -> tuple[GradientFn | None, float]:
    """``torch.compile(function)`` and its compile seconds; (None, 0) where it fails."""
    try:
        began = time.perf_counter()
        fast = torch.compile(function, dynamic=False)
        fast(*example)
        return fast, time.perf_counter() - began
    except Exception as error:  # noqa: BLE001 (no C++ compiler, an unsupported operator)
        print(f"torch.compile failed ({type(error).__name__}): {str(error)[:200]}")
        return None, 0.0


def sghmc_variants(setup: Setup, settings: Settings) -> dict[str, float]:
    """Milliseconds per single-chain SGHMC step of each variant, full batch."""
    batch = (setup.inputs, setup.targets)
    engine = bayesflow_engine(setup, "sghmc")
    state = bayesflow_state(engine, setup)
    params, momenta = state.params[0], state.momenta[0]
    per_datum = 1.0 / setup.num_data

    def log_posterior(theta: torch.Tensor, data: Any) -> torch.Tensor:
        return setup.problem.log_posterior(theta, data)

    def autograd(theta: torch.Tensor, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
        theta = theta.detach().requires_grad_(True)
        value = log_posterior(theta, data)
        return torch.autograd.grad(value, theta)[0], value.detach()

    single = grad_and_value(log_posterior)
    contenders: dict[str, Callable[[], None]] = {
        "engine (vmap over 1 chain)": Stepper(engine.update, state, [batch]),
        "no vmap, fused update": FusedSGHMC(single, params, momenta, [batch], per_datum),
        "torch.autograd.grad, fused update": FusedSGHMC(
            autograd, params, momenta, [batch], per_datum
        ),
    }
    fast, seconds = compiled(single, params, batch)
    if fast is not None:
        contenders[f"compiled gradient, fused update (compile {seconds:.0f} s)"] = FusedSGHMC(
            fast, params, momenta, [batch], per_datum
        )
    transform = peer_transform(setup, "sghmc")
    contenders["posteriors"] = Stepper(
        transform.update, peer_state(transform, setup, setup.start, momenta=momenta), [batch]
    )
    return {name: timing.median * 1e3 for name, timing in compare(contenders, settings).items()}


def vi_variants(setup: Setup, settings: Settings) -> dict[str, float]:
    """Milliseconds per VI step of each variant, full batch."""
    import torchopt

    batch = (setup.inputs, setup.targets)
    engine = bayesflow_engine(setup, "vi_diag")
    state = bayesflow_state(engine, setup)
    per_datum = 1.0 / setup.num_data
    optimizer = torchopt.adam(1e-2)

    def loss(
        variational: tuple[torch.Tensor, torch.Tensor], data: Any, noise: torch.Tensor
    ) -> torch.Tensor:
        mean, log_sd = variational
        draw = mean + log_sd.exp() * noise
        standardised = (draw - mean.detach()) / log_sd.detach().exp()
        log_q = -0.5 * (standardised**2).sum() - log_sd.detach().sum()
        return -(setup.problem.log_posterior(draw, data) - per_datum * log_q)

    class Step:
        def __init__(self, gradient: Callable[..., Any]) -> None:
            self.gradient = gradient
            self.variational = (state.mean.clone(), state.log_sd.clone())
            self.optimizer = optimizer.init(self.variational)
            self.generator = torch.Generator().manual_seed(0)

        def __call__(self) -> None:
            noise = torch.randn(setup.problem.dimension, generator=self.generator)
            grads, _ = self.gradient(self.variational, batch, noise)
            updates, self.optimizer = optimizer.update(
                grads, self.optimizer, params=self.variational
            )
            self.variational = torchopt.apply_updates(self.variational, updates, inplace=False)

    gradient = grad_and_value(loss)
    contenders: dict[str, Callable[[], None]] = {
        "engine": Stepper(engine.update, state, [batch]),
        "one draw, no vmap": Step(gradient),
    }
    fast, seconds = compiled(
        gradient, (state.mean, state.log_sd), batch, torch.zeros_like(state.mean)
    )
    if fast is not None:
        contenders[f"compiled gradient (compile {seconds:.0f} s)"] = Step(fast)
    transform = peer_transform(setup, "vi_diag")
    contenders["posteriors"] = Stepper(
        transform.update, peer_state(transform, setup, setup.start), [batch]
    )
    return {name: timing.median * 1e3 for name, timing in compare(contenders, settings).items()}


def chain_variants(setup: Setup, settings: Settings) -> list[list[str]]:
    """Per-step milliseconds of K vectorised chains, with and without a compiled gradient."""
    rows = []
    for chains, batch_size in ((100, None), (1000, None), (10_000, 32)):
        batches = minibatch_list(setup, batch_size)
        engine = bayesflow_engine(setup, "sghmc", chains=chains, batch_size=batch_size)
        state = bayesflow_state(engine, setup)

        def log_posterior(theta: torch.Tensor, data: Any) -> torch.Tensor:
            return setup.problem.log_posterior(theta, data)

        gradient = vmap(grad_and_value(log_posterior), in_dims=(0, None))
        fast, seconds = compiled(gradient, state.params, batches[0])
        contenders: dict[str, Callable[[], None]] = {
            "engine": Stepper(engine.update, state, batches)
        }
        if fast is not None:
            contenders["compiled"] = FusedSGHMC(
                fast, state.params, state.momenta, batches, 1.0 / setup.num_data
            )
        timings = compare(contenders, settings)
        engine_ms = timings["engine"].median * 1e3
        compiled_ms = timings["compiled"].median * 1e3 if "compiled" in timings else math.nan
        rows.append(
            [
                str(chains),
                str(batch_size or "full"),
                f"{engine_ms:.2f}",
                f"{compiled_ms:.2f}",
                f"{seconds:.1f}",
            ]
        )
    return rows


def init_variants(setup: Setup) -> dict[str, float]:
    """Milliseconds per chain start: ``init_params`` as it is, and seeded CPU-only."""
    generator = torch.Generator().manual_seed(0)
    count = 500
    began = time.perf_counter()
    for _ in range(count):
        setup.problem.init_params(generator)
    as_is = (time.perf_counter() - began) / count
    module = setup.module
    began = time.perf_counter()
    for seed in range(count):
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            for child in module.modules():
                reset = getattr(child, "reset_parameters", None)
                if callable(reset):
                    reset()
            torch.cat([p.detach().reshape(-1) for p in module.parameters()]).clone()
    seeded = (time.perf_counter() - began) / count
    return {
        "init_params (torch.manual_seed)": as_is * 1e3,
        "default_generator.manual_seed": seeded * 1e3,
    }


def table(values: dict[str, float], unit: str = "ms") -> str:
    """A two-column Markdown table."""
    lines = [f"| variant | {unit} |", "| --- | --- |"]
    return "\n".join(lines + [f"| {name} | {value:.3f} |" for name, value in values.items()])


def main() -> None:
    """Print every profile as Markdown."""
    torch.set_num_threads(1)
    settings = Settings.for_mode("quick")
    setup = pima()
    engine = bayesflow_engine(setup, "sghmc")
    stepper = Stepper(
        engine.update, bayesflow_state(engine, setup), [(setup.inputs, setup.targets)]
    )
    for _ in range(20):
        stepper()
    print("## Python hot spots: SGHMC update, one chain, Pima full batch (300 steps)\n")
    print("```\n" + python_hot_spots(stepper, 300) + "```\n")
    chains = bayesflow_engine(setup, "sghmc", chains=1000)
    wide = Stepper(chains.update, bayesflow_state(chains, setup), [(setup.inputs, setup.targets)])
    wide()
    print("## Operator hot spots: SGHMC update, 1,000 chains, Pima full batch (10 steps)\n")
    print("```\n" + operator_hot_spots(wide, 10) + "\n```\n")
    print("## SGHMC step variants, one chain, full batch\n")
    print(table(sghmc_variants(setup, settings)) + "\n")
    print("## VI step variants, full batch\n")
    print(table(vi_variants(setup, settings)) + "\n")
    print("## Vectorised chains, ms per step\n")
    rows = chain_variants(setup, settings)
    print("| K | batch | engine | compiled gradient | compile s |\n| --- | --- | --- | --- | --- |")
    print("\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n")
    print("## Chain starts\n")
    print(table(init_variants(setup), "ms per chain"))


if __name__ == "__main__":
    main()
