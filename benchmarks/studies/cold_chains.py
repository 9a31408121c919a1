"""Do cold SGHMC chains on digits keep their temperature, and does the remedy fix them?

Issue 14 ("honest cold chains"): at batch 32 on digits the minibatch gradient noise heats
SGHMC's cold chains. This script measures it and the remedies of
:mod:`bayesflow.methods.sghmc` (docs/cold-chains.md explains them and holds the table)::

    python -m benchmarks.studies.cold_chains                 # every variant, T = 0.001, 0.01, 0.1, 1
    python -m benchmarks.studies.cold_chains --quick         # fewer epochs, T = 0.01 and 1
    python -m benchmarks.studies.cold_chains --variants default remedy --temperatures 0.01

The setup is the ``sghmc`` method of the bundled ``cold_posterior_wenzel`` workflow (the
``cold_posterior`` workflow's data, split, MLP and prior; lr 0.1, alpha 1, batch 32,
100 epochs, burn-in 400, every 10th step kept). Each variant changes only what its row of
:data:`VARIANTS` says. For every kept step the script measures the kinetic temperature of
every tensor's momenta against its 99% χ² band (:mod:`bayesflow.evaluate.temperatures`)
(with ``gradient_noise: estimated`` the engine steps a whole epoch per update, so there at
each epoch's end after burn-in); it reports the ratio to T averaged over those records,
over the epochs' ends alone (where the fit stage measures it), and at the last step, the
fraction of (record, tensor) pairs inside their band, the configurational temperature ratio
(averaged over :data:`CONFIGURATIONAL_SAMPLES` kept states, full training set), the test
NLL and accuracy of the kept samples' predictive, and the seconds per update step. The
results go to ``benchmarks/results/cold-chains/<date>-<device>[-quick].json`` with the
commit, machine and library versions (:mod:`benchmarks.common.provenance`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import RESULTS, ROOT
from benchmarks.common.provenance import machine, stamp

__all__ = ["VARIANTS", "main", "measure"]

WORKFLOW = "cold_posterior_wenzel"
METHOD = "sghmc"
# What each variant changes in the workflow's sghmc settings.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "matched": {"discretisation": "matched"},
    "estimated_euler": {"gradient_noise": "estimated"},
    "remedy": {"discretisation": "matched", "gradient_noise": "estimated"},
    # Alternatives without the options: four times the batch (the same number of steps),
    # a third of the step size (three times the steps, so it travels as far).
    "batch_128": {"batch_size": 128, "epochs": 400, "burn_in": 400, "thin": 10},
    "lr_0.03": {"lr": 0.03, "epochs": 300, "burn_in": 1200, "thin": 30},
    "remedy_lr_0.03": {"discretisation": "matched", "gradient_noise": "estimated",
                       "lr": 0.03, "epochs": 300, "burn_in": 1200, "thin": 30},
    "remedy_batch_128": {"discretisation": "matched", "gradient_noise": "estimated",
                         "batch_size": 128, "epochs": 400, "burn_in": 400, "thin": 10},
    # The step size the estimate recommends at T = 0.001 (lr_limit_all, about 0.05),
    # four times the epochs, the first three quarters burn-in.
    "remedy_lr_0.05_long": {"discretisation": "matched", "gradient_noise": "estimated",
                            "lr": 0.05, "epochs": 400, "burn_in": 8700, "thin": 10},
}
TEMPERATURES = (0.001, 0.01, 0.1, 1.0)
QUICK_TEMPERATURES = (0.01, 1.0)
CONFIGURATIONAL_SAMPLES = 50
PREDICTIVE_SAMPLES = 50


def measure(variant: str, temperature: float, seed: int, quick: bool = False) -> dict[str, Any]:
    """One fit of the workflow's SGHMC at ``temperature`` under ``variant``, measured."""
    from bayesflow.api import load, prepare
    from bayesflow.dag.plan import Stage
    from bayesflow.engines.fit import minibatches
    from bayesflow.evaluate.predictive import evaluate_classification, predictive_outputs
    from bayesflow.evaluate.temperatures import kinetic_temperature
    from bayesflow.methods import METHODS
    from bayesflow.stages.context import WorkflowContext

    overrides = dict(VARIANTS[variant])
    if quick:
        overrides = {**overrides, **quick_schedule(overrides)}
    prepared = prepare(load(WORKFLOW, [f"temperatures=[{temperature}]", f"seeds=[{seed}]"]))
    context = WorkflowContext(prepared.loaded, prepared.dataset)
    base = context.spec.methods[METHOD].model_dump()
    config: Any = METHODS.get("sghmc").spec.model_validate({**base, **overrides})
    stage = Stage(f"fit/{METHOD}", "fit", (), "", METHOD, "sghmc", temperature, seed)
    problem, likelihood, tempering = context.problem(stage)
    generator = context.generator(problem.device, seed)
    params = problem.init_params(generator)
    engine = METHODS.get("sghmc").builder()(problem, tempering, config)
    x_train, y_train = context.training_data(problem.device)
    sizes = [int(np.prod(shape)) for shape in problem.param_shapes]
    state, seconds = engine.init(params, generator), 0.0
    # Per record (a kept step, or for an engine that steps a whole epoch per update, an
    # epoch's end after burn-in): each tensor's mean m² (P,), and whether it ends an epoch.
    kept: list[np.ndarray] = []
    epoch_ends: list[bool] = []
    at_kept: list[bool] = []
    for _ in range(config.epochs):
        batches = list(minibatches(x_train, y_train, engine.batch_size, generator, engine.streams))
        for index, batch in enumerate(batches):
            began = time.perf_counter()
            state, _ = engine.update(state, batch)
            seconds += time.perf_counter() - began
            last = index == len(batches) - 1
            past = state.step - config.burn_in
            keep = past % config.thin == 0 or len(batches) == 1
            if past > 0 and (keep or last):
                squares = state.momenta.detach().double() ** 2
                kept.append(np.array([p.mean().item() for p in squares.split(sizes, dim=-1)]))
                epoch_ends.append(last)
                at_kept.append(keep)
    step = state.step
    records = np.stack(kept)  # (R, P)
    per_step = records[np.array(at_kept)]  # (S, P), the kept steps
    final = kinetic_temperature(
        state.momenta, tempering.per_datum, param_shapes=problem.param_shapes,
        param_names=problem.param_names,
    )
    inside = (per_step >= final.lower) & (per_step <= final.upper)
    weights = np.array(sizes) / sum(sizes)
    samples = engine.posterior(state).samples
    assert samples is not None
    conf = configurational(problem, tempering, samples, x_train, y_train)
    picked = samples[np.linspace(0, len(samples) - 1, PREDICTIVE_SAMPLES).round().astype(int)]
    x_test, y_test = context.test_data(problem.device)
    scores = evaluate_classification(
        predictive_outputs(problem, picked, x_test), likelihood, y_test
    ).metrics
    return {
        "variant": variant,
        "temperature": temperature,
        "seed": seed,
        "config": {key: overrides.get(key, base.get(key)) for key in (
            "lr", "alpha", "batch_size", "epochs", "burn_in", "thin", "discretisation",
            "gradient_noise")},
        "kinetic_ratio_mean": float((per_step @ weights).mean() / tempering.per_datum),
        "kinetic_ratio_last": final.temperature / tempering.per_datum,
        "kinetic_ratio_epoch_ends": float(
            (records[np.array(epoch_ends)] @ weights).mean() / tempering.per_datum
        ) if any(epoch_ends) else None,
        "kinetic_ratio_trace": [round(float(v), 4) for v in per_step @ weights / tempering.per_datum],
        "kinetic_ratio_per_tensor": {
            name: float(value) for name, value in
            zip(problem.param_names, per_step.mean(0) / tempering.per_datum)
        },
        # The spread of single records, against the χ² band's √(2/d) for d independent
        # Gaussian coordinates.
        "kinetic_ratio_sd_per_tensor": {
            name: float(value) for name, value in
            zip(problem.param_names, per_step.std(0) / tempering.per_datum)
        },
        "chi2_sd_per_tensor": {
            name: float(np.sqrt(2 / size)) for name, size in zip(problem.param_names, sizes)
        },
        "fraction_in_band": float(inside.mean()),
        "fraction_in_band_per_tensor": {
            name: float(value) for name, value in zip(problem.param_names, inside.mean(0))
        },
        "band": {name: [float(lo / tempering.per_datum), float(hi / tempering.per_datum)]
                 for name, lo, hi in zip(problem.param_names, final.lower, final.upper)},
        "configurational_ratio": conf,
        "raised_friction": raised_friction(state, config, tempering.per_datum),
        "test_nll": float(scores["test_nll"]),
        "test_accuracy": float(scores["test_accuracy"]),
        "kept_records": len(per_step),
        "steps": step,
        "seconds_per_step": seconds / step,
    }


def quick_schedule(overrides: dict[str, Any]) -> dict[str, Any]:
    """A third of the epochs, burn-in and all (the same thinning)."""
    epochs = overrides.get("epochs", 100) // 3
    burn_in = overrides.get("burn_in", 400) // 3
    return {"epochs": epochs, "burn_in": burn_in}


def configurational(problem: Any, tempering: Any, samples: torch.Tensor, inputs: torch.Tensor,
                    targets: torch.Tensor) -> float:
    """T_conf / 𝒯 averaged over :data:`CONFIGURATIONAL_SAMPLES` kept states, the gradient of
    U = −f on the whole training set."""
    from torch.func import grad, vmap

    from bayesflow.evaluate.temperatures import configurational_temperature

    picked = samples[np.linspace(0, len(samples) - 1, CONFIGURATIONAL_SAMPLES).round().astype(int)]

    def log_posterior(params: torch.Tensor) -> torch.Tensor:
        return problem.log_posterior(params, (inputs, targets), tempering.prior_weight)

    with torch.no_grad():
        gradients = vmap(grad(log_posterior))(picked)
    result = configurational_temperature(picked, -gradients, expected=tempering.per_datum)
    return float(result.temperature / tempering.per_datum)


def raised_friction(state: Any, config: Any, per_datum: float) -> dict[str, float]:
    """With the gradient-noise estimate, at the last state: the share of parameters whose
    friction a batch raises above lr·alpha, the share at the cap a = 1 (which still run
    hot), and the mean a."""
    if getattr(state, "noise", None) is None:
        return {}
    from bayesflow.methods.sghmc import corrected_step

    batch = (torch.zeros(config.batch_size, 1), torch.zeros(config.batch_size))
    _, damping, variance = corrected_step(
        config.lr, config.alpha, 0.0, config.discretisation == "matched", per_datum,
        state.noise, batch,
    )
    assert isinstance(damping, torch.Tensor) and isinstance(variance, torch.Tensor)
    base = config.lr * config.alpha
    # Matched, a parameter stays below the cap while lr²·V ≤ 4𝒯 (V = s²/B): the largest
    # step size for which every parameter (or all but 0.1%) can be kept at temperature.
    limit = 2 * (per_datum * config.batch_size / state.noise.double()).sqrt()
    return {
        "raised": float((damping > base).double().mean()),
        # At the cap the variance left is negative; at a raised friction below the cap it
        # is zero up to rounding.
        "capped_hot": float(((damping >= 1) & (variance < 0)).double().mean()),
        "mean_damping": float(damping.mean()),
        "lr_limit_all": float(limit.min()),
        "lr_limit_999": float(limit.flatten().quantile(0.001)),
    }


COST_VARIANTS = ("default", "remedy", "batch_128", "remedy_batch_128")


def cost(temperature: float = 0.01, seed: int = 0) -> dict[str, Any]:
    """Seconds per update step of :data:`COST_VARIANTS`, timed interleaved one epoch at a
    time (:func:`benchmarks.common.timing.compare`, so a change of the machine's load between
    repeats falls on every variant alike), with each variant's ratio to ``default``."""
    from bayesflow.api import load, prepare
    from bayesflow.dag.plan import Stage
    from bayesflow.engines.fit import minibatches
    from bayesflow.engines.optimize import steps_per_epoch
    from bayesflow.methods import METHODS
    from bayesflow.stages.context import WorkflowContext
    from benchmarks.common.timing import Settings, compare, paired_ratio

    prepared = prepare(load(WORKFLOW, [f"temperatures=[{temperature}]", f"seeds=[{seed}]"]))
    context = WorkflowContext(prepared.loaded, prepared.dataset)
    base = context.spec.methods[METHOD].model_dump()
    stage = Stage(f"fit/{METHOD}", "fit", (), "", METHOD, "sghmc", temperature, seed)
    problem, _, tempering = context.problem(stage)
    x_train, y_train = context.training_data(problem.device)
    contenders: dict[str, Any] = {}
    steps: dict[str, int] = {}
    for variant in COST_VARIANTS:
        config: Any = METHODS.get("sghmc").spec.model_validate({**base, **VARIANTS[variant]})
        engine = METHODS.get("sghmc").builder()(problem, tempering, config)
        generator = context.generator(problem.device, seed)
        state = [engine.init(problem.init_params(generator), generator)]

        def epoch(engine: Any = engine, state: list[Any] = state, generator: Any = generator) -> None:
            for batch in minibatches(x_train, y_train, engine.batch_size, generator, engine.streams):
                state[0], _ = engine.update(state[0], batch)
            state[0].samples.clear()  # nothing kept: the timing loop runs past the schedule

        contenders[variant] = epoch
        steps[variant] = steps_per_epoch(problem.num_data, config.batch_size)
    timings = compare(contenders, Settings(repeats=9), count=5, warmup=3)
    per_step = {name: timing.median / steps[name] for name, timing in timings.items()}
    return {
        "temperature": temperature,
        "seconds_per_step": per_step,
        "per_epoch": {name: timing.as_dict() for name, timing in timings.items()},
        "ratio_to_default_per_step": {
            name: paired_ratio(timings[name], timings["default"])["median"]
            * steps["default"] / steps[name]
            for name in timings
        },
    }


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.cold_chains", description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--temperatures", nargs="+", type=float, default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--quick", action="store_true", help="a third of the epochs; T = 0.01, 1")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cold-chains", help="folder of the results JSON")
    parser.add_argument("--doc", type=Path, default=None,
                        help="replace the table between the markers of this page (docs/cold-chains.md)")
    parser.add_argument("--render", type=Path, default=None,
                        help="render a results JSON written earlier into --doc, measuring nothing")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure every (variant, temperature, seed) and write the results JSON."""
    args = parse(argv)
    if args.render is not None:
        results = json.loads(args.render.read_text())
        if args.doc is not None:
            replace_block(args.doc, render(results, args.render))
        return dict(results)
    torch.set_num_threads(args.threads)
    temperatures = args.temperatures or (QUICK_TEMPERATURES if args.quick else TEMPERATURES)
    rows = []
    for variant in args.variants:
        for temperature in temperatures:
            for seed in args.seeds:
                row = measure(variant, temperature, seed, args.quick)
                rows.append(row)
                print(line(row), flush=True)
    timing = cost() if not args.quick else None
    date, clock = stamp()
    results = {
        "date": date,
        "time": clock,
        "workflow": WORKFLOW,
        "method": METHOD,
        "settings": {"mode": "quick" if args.quick else "full", "seeds": args.seeds,
                     "temperatures": list(temperatures), "variants": VARIANTS},
        "machine": machine("cpu", args.threads),
        "rows": rows,
        "cost": timing,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    path = args.out / f"{date}-cpu{suffix}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {path}")
    if args.doc is not None:
        replace_block(args.doc, render(results, path))
    return results


BEGIN, END = "<!-- cold-chains:begin -->", "<!-- cold-chains:end -->"


def render(results: dict[str, Any], path: Path) -> str:
    """The results as a markdown table (one row per variant and temperature) and their
    provenance."""
    head = ("| variant | T | T_kin / T, kept steps | at epochs' ends | (record, tensor) pairs "
            "in band | T_conf / T | raised friction / at cap | test NLL | test acc. | ms/step |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in results["rows"]:
        friction = row["raised_friction"]
        raised = (f"{100 * friction['raised']:.1f}% / {100 * friction['capped_hot']:.1f}%"
                  if friction else "")
        ends = row["kinetic_ratio_epoch_ends"]
        lines.append(
            f"| {row['variant']} | {row['temperature']:g} | {row['kinetic_ratio_mean']:.3f} | "
            f"{'' if ends is None else f'{ends:.3f}'} | {row['fraction_in_band']:.2f} | "
            f"{row['configurational_ratio']:.2f} | {raised} | {row['test_nll']:.3f} | "
            f"{row['test_accuracy']:.3f} | {1000 * row['seconds_per_step']:.2f} |"
        )
    timing = results.get("cost")
    if timing:
        lines += ["", "Seconds per update step at T = {:g}, timed interleaved one epoch at a time "
                  "(median of 9; ratio to `default`, paired by repeat): {}.".format(
                      timing["temperature"], ", ".join(
                          f"{name} {1000 * seconds:.2f} ms ({timing['ratio_to_default_per_step'][name]:.2f}x)"
                          for name, seconds in timing["seconds_per_step"].items()))]
    info = results["machine"]
    lines += [
        "",
        (f"Measured {results['date']} {results['time']} by `python -m benchmarks.studies.cold_chains` "
        f"({results['settings']['mode']}, seeds {results['settings']['seeds']}), bayesflow "
        f"{info['bayesflow_revision']}, {info['cpu']} ({info['cores']} cores, load average "
        f"{info['load_average'][0]:.1f} at the end; ms/step are wall time on a shared "
        f"machine), torch {info['versions'].get('torch')}, {info['threads']} thread; results "
        f"in `{path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path}`."),
    ]
    return "\n".join(lines)


def replace_block(doc: Path, block: str) -> None:
    """Put ``block`` between the page's markers."""
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + block + "\n" + text[end:])


def line(row: dict[str, Any]) -> str:
    """One printed line per fit."""
    friction = row["raised_friction"]
    extra = f" raised {friction['raised']:.2f} hot {friction['capped_hot']:.3f}" if friction else ""
    return (
        f"{row['variant']:>16} T={row['temperature']:<6g} seed={row['seed']} "
        f"kin {row['kinetic_ratio_mean']:.3f} (epoch ends {row['kinetic_ratio_epoch_ends'] or 0:.3f}, "
        f"last {row['kinetic_ratio_last']:.3f}) "
        f"in band {row['fraction_in_band']:.2f} conf {row['configurational_ratio']:.2f} "
        f"nll {row['test_nll']:.3f} acc {row['test_accuracy']:.3f} "
        f"{1000 * row['seconds_per_step']:.2f} ms/step{extra}"
    )


if __name__ == "__main__":
    main()
