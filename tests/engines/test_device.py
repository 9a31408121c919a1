"""Every engine runs on a CUDA device, as a fit stage drives it (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from bayesflow.engines.fit import fit
from bayesflow.errors import MissingDependencyError
from bayesflow.likelihoods import categorical
from bayesflow.methods import METHODS
from bayesflow.models import mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem
from bayesflow.temperature import Tempering
from tests.engines.helpers import make_config

NUM_DATA = 24

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("name", METHODS.names())
def test_engine_runs_on_cuda(name: str) -> None:
    """A fit on the GPU, with a GPU generator as the fit stage uses, stays on the GPU."""
    device = torch.device("cuda")
    model = mlp(2, 3, hidden=[5], activation="tanh")
    problem = build_problem(model, categorical(), diag_normal(1.0), NUM_DATA, device)
    generator = torch.Generator(device=device).manual_seed(0)
    inputs = torch.randn(NUM_DATA, 2, generator=generator, device=device)
    targets = torch.randint(0, 3, (NUM_DATA,), generator=generator, device=device)
    params = problem.init_params(generator).to(device)
    tempering = Tempering(1.0, NUM_DATA)
    if METHODS.get(name).traits.needs_mode:
        optimizer = {"lr": 0.05}
        config = make_config("map", epochs=300, batch_size=None, optimizer=optimizer)
        engine = METHODS.get("map").builder()(problem, tempering, config)
        params = fit(engine, params, inputs, targets, generator).posterior.mean
    try:
        engine = METHODS.get(name).builder()(problem, tempering, make_config(name))
    except MissingDependencyError as error:  # an optional extra (pyro for nuts) not installed
        pytest.skip(str(error))
    posterior = fit(engine, params, inputs, targets, generator).posterior
    for value in (posterior.samples, posterior.mean, posterior.var, posterior.cov):
        if value is not None:
            assert value.device.type == "cuda" and bool(torch.isfinite(value).all())
    assert posterior.sample(3, generator).device.type == "cuda"
