"""Case ``kfac``: KFAC Laplace against laplace-torch on the digits MLP.

The default workflow's MLP on sklearn digits (898 training images, one hidden layer of
64 ReLU units, d = 4,810, prior variance 0.5), at the initialisation shared by both. One
curvature fit is, for both libraries, one full-batch pass that builds the Kronecker
factors and their eigendecompositions:

- bayesflow: ``laplace_kfac_ggn`` / ``laplace_kfac_fisher``, the engine's ``update`` on the
  whole training set then ``posterior`` (eigendecompositions, and the marginal variances,
  which laplace-torch's ``fit`` does not compute);
- laplace-torch: ``Laplace(..., hessian_structure="kron")`` with ``CurvlinopsGGN`` (exact
  KFAC of the GGN) / ``CurvlinopsEF``, ``fit`` on one DataLoader batch of 898.

Seconds are timed interleaved (:func:`benchmarks.common.timing.compare`). Peak memory is the
growth of the peak resident set size of a fresh process over one fit (on the CPU; on a
GPU ``torch.cuda.max_memory_allocated``), :mod:`benchmarks.speed.kfac.memory`. Before any
timing, the two libraries' Kronecker factors are compared (their largest relative
difference is reported; ``tests/engines/test_laplace_kfac.py`` holds the exact checks).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import torch

from benchmarks.common.problems import Setup, digits
from benchmarks.common.timing import Settings, compare, load_average, paired_ratio

__all__ = ["CURVATURES", "bayesflow_fit", "laplace_torch_fit", "run"]

# bayesflow engine -> laplace-torch backend (both exact, not Monte Carlo sampled).
CURVATURES = {"laplace_kfac_ggn": "CurvlinopsGGN", "laplace_kfac_fisher": "CurvlinopsEF"}


def bayesflow_fit(setup: Setup, engine_name: str) -> Any:
    """One KFAC Laplace fit at the start: a full-batch curvature pass and the posterior."""
    from bayesflow.methods import METHODS
    from bayesflow.temperature import Tempering

    method = METHODS.get(engine_name)
    spec = method.spec.model_validate({"engine": engine_name, "batch_size": None})
    engine = method.builder()(setup.problem, Tempering(1.0, setup.num_data), spec)
    generator = torch.Generator(device=setup.inputs.device)

    def fit() -> Any:
        state = engine.init(setup.start, generator)
        state, _ = engine.update(state, (setup.inputs, setup.targets))
        return state, engine.posterior(state)

    return fit


def laplace_torch_fit(setup: Setup, engine_name: str) -> Any:
    """One laplace-torch Kronecker Laplace fit of the same model, data and prior."""
    from laplace import Laplace
    from laplace import curvature as backends
    from torch.utils.data import DataLoader, TensorDataset

    model = copy.deepcopy(setup.module)
    torch.nn.utils.vector_to_parameters(setup.start, model.parameters())
    loader = DataLoader(TensorDataset(setup.inputs, setup.targets), batch_size=setup.num_data)
    backend = getattr(backends, CURVATURES[engine_name])

    def fit() -> Any:
        approximation = Laplace(
            model, "classification", subset_of_weights="all", hessian_structure="kron",
            prior_precision=1 / setup.prior_variance, backend=backend,
        )
        approximation.fit(loader)
        return approximation

    return fit


def factor_difference(setup: Setup, engine_name: str) -> float:
    """The largest relative difference between the two libraries' Kronecker factors."""
    from bayesflow.engines.kfac import kfac_layers, unpack

    state, _ = bayesflow_fit(setup, engine_name)()
    theirs = laplace_torch_fit(setup, engine_name)().H_facs.kfacs
    worst = 0.0
    ours = unpack(kfac_layers(setup.problem, engine_name), state.curvature)
    for number_, (inputs, gradient, rows) in enumerate(ours):
        for mine, other in ((gradient, theirs[2 * number_][0]), (inputs / rows, theirs[2 * number_][1])):
            scale = float(other.abs().max())
            worst = max(worst, float((mine - other).abs().max()) / scale)
    return worst


def peak_memory(engine_name: str, library: str, device: str) -> int:
    """Bytes of peak memory one fit adds, measured in a fresh process."""
    command = [sys.executable, "-m", "benchmarks.speed.kfac.memory", engine_name, library, device]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return int(json.loads(output.strip().splitlines()[-1])["peak_bytes"])


def run(settings: Settings) -> dict[str, Any]:
    """Seconds and peak memory of one KFAC fit in each library, GGN and empirical Fisher."""
    setup = digits(settings.device)
    rows = []
    for engine_name, backend in CURVATURES.items():
        load = load_average()
        contenders = {
            "bayesflow": bayesflow_fit(setup, engine_name),
            "laplace_torch": laplace_torch_fit(setup, engine_name),
        }
        timings = compare(contenders, settings, count=3, warmup=1)
        rows.append({
            "method": engine_name,
            "backend": backend,
            "timings": {name: timing.as_dict() for name, timing in timings.items()},
            "ratio_paired": paired_ratio(timings["bayesflow"], timings["laplace_torch"]),
            "factor_difference": factor_difference(setup, engine_name),
            # Smoke mode (the tests) leaves out the two processes per engine.
            "peak_bytes": {
                library: None if settings.smoke else peak_memory(engine_name, library, settings.device)
                for library in contenders
            },
            "load_average": [load, load_average()],
        })
    return {"data": {"rows": setup.num_data, "dimension": setup.problem.dimension}, "rows": rows}
