"""The fit_group stage: every cell of a vectorised SG-MCMC grid as one batched engine run.

The group has K = cells × C chains (C = the method's ``chains``), chain k at its cell's
temperature (:class:`~bayesflow.temperature.ChainTempering`). Each cell's C chains start
where its one-by-one fit's do (``init_params`` and
:func:`~bayesflow.engines.sgmcmc.chain_starts` under a generator seeded with the cell's
seed); the momenta, the noise and the minibatch order come from one generator seeded by
the group's key. Each cell's ``fit`` stage then takes its own posterior out of the group
(:mod:`bayesflow.stages.fit`).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.errors import DivergenceError, StageError
from bayesflow.methods.registry import method_of, traits_of
from bayesflow.stages.artefacts import FitGroupArtefact
from bayesflow.stages.context import WorkflowContext

__all__ = ["fit_group"]


def fit_group(context: WorkflowContext, stage: Stage, staging: Path) -> FitGroupArtefact:
    """Fit every cell of ``stage`` (``config["cells"]``) at once into ``staging``.

    Writes ``posterior-<i>.npz`` for cell i; each cell's record holds the group's steps,
    its seconds divided among the cells, the cell's own loss trace and its sampler
    diagnostics.
    """
    import torch

    from bayesflow.engines.fit import fit as run_engine
    from bayesflow.engines.sgmcmc import chain_starts
    from bayesflow.temperature import ChainTempering

    spec = context.spec
    cells = stage.config["cells"]
    config = context.method(stage)
    if "temperatures" not in traits_of(config).vectorizes:
        raise StageError(f"{stage.name}: method {stage.engine} cannot run as a vectorised grid")
    per_cell = config.chains
    per_start = getattr(config, "chains_per_start", 1)
    problem, _, _ = context.problem(stage)
    starts = []
    for cell in cells:
        generator = context.generator(problem.device, int(cell["seed"]))
        params = problem.init_params(generator)
        starts.append(chain_starts(problem, params, per_cell, generator, per_start))
    temperatures = tuple(float(cell["temperature"]) for cell in cells for _ in range(per_cell))
    tempering = ChainTempering(temperatures, problem.num_data, spec.temperature_convention)
    engine = method_of(config).builder()(problem, tempering, config)
    chain_losses: list[Any] = []
    histories: list[list[float]] = [[] for _ in cells]

    def update(state: Any, batch: Any) -> tuple[Any, dict[str, Any]]:
        state, aux = engine.update(state, batch)
        chain_losses.append(aux["chain_loss"])
        return state, aux

    def on_epoch(epoch: int, loss: float) -> None:
        # One read-back per epoch, as fit itself does: each cell's mean −f.
        per_chain = torch.stack(chain_losses).mean(0).reshape(len(cells), per_cell)
        for history, value in zip(histories, per_chain.mean(1).tolist()):
            history.append(float(value))
        chain_losses.clear()

    x_train, y_train = context.training_data(problem.device)
    generator = context.generator(problem.device, int(stage.key, 16) % 2**63)
    began = time.perf_counter()
    try:
        result = run_engine(
            engine._replace(update=update), torch.cat(starts), x_train, y_train, generator,
            on_epoch=on_epoch,
        )
    except DivergenceError as exc:
        raise DivergenceError(
            f"method {stage.method!r} ({stage.engine}), the vectorised grid of "
            f"{len(cells)} cells, diverged: {exc}"
        ) from exc
    seconds = time.perf_counter() - began
    assert result.posterior.samples is not None  # samplers' posteriors are samples
    samples = result.posterior.samples.reshape(len(cells), -1, problem.dimension)
    paths, fits = [], []
    for index, cell in enumerate(cells):
        posterior = type(result.posterior)(samples=samples[index])
        path = staging / f"posterior-{index}.npz"
        np.savez(path, **posterior.to_arrays(problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
        paths.append(path)
        diagnostics = {}
        if spec.evaluate.diagnostics:
            diagnostics = _cell_diagnostics(
                context, problem, result.state, posterior, slice(index * per_cell, (index + 1) * per_cell),
                (per_cell, per_start), float(cell["temperature"]), (x_train, y_train),
            )
        fits.append({
            "fit_seconds": seconds / len(cells),
            "steps": int(result.steps),
            "history": histories[index],
            "diagnostics": diagnostics,
        })
    return FitGroupArtefact([cell["name"] for cell in cells], paths, fits, seconds)


def _cell_diagnostics(
    context: WorkflowContext, problem: Any, state: Any, posterior: Any, rows: slice,
    chains: tuple[int, int], temperature: float, data: tuple[Any, Any],
) -> dict[str, float]:
    """The sampler diagnostics of one cell's chains (``rows`` of the group's state; ``chains``
    their count and how many share a start) at the cell's own temperature."""
    from bayesflow.evaluate.sampler import sampler_diagnostics
    from bayesflow.temperature import Tempering

    momenta, mass = getattr(state, "momenta", None), getattr(state, "mass", None)
    cell_state = SimpleNamespace(
        params=state.params[rows], momenta=None if momenta is None else momenta[rows],
        mass=None if mass is None else mass[rows],  # a sampler with a mass matrix M
    )
    tempering = Tempering(temperature, problem.num_data, context.spec.temperature_convention)
    return sampler_diagnostics(
        problem, tempering, cell_state, posterior, chains[0], *data, chains_per_start=chains[1]
    )
