"""The engines' in-place optimiser step (:class:`bayesflow.engines.optimize.InPlaceOptimizer`)
takes torchopt's functional steps (what the engines ran before) and ``torch.optim``'s.

No engine vmaps its optimiser: ``deep_ensemble`` steps its K members as one (K, d)
tensor, elementwise, so the (3, 50) parameters below are that case.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torchopt

from bayesflow.engines.optimize import build_optimizer, build_step
from bayesflow.methods import METHODS
from bayesflow.methods.base import OptimizerSpec
from bayesflow.temperature import Tempering
from tests.engines.helpers import NUM_DATA, Regression

OPTIMIZERS = [
    {"name": "sgd", "lr": 0.1},
    {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.1},
    {"name": "adam", "lr": 0.05},
    {"name": "adam", "lr": 0.05, "weight_decay": 0.2, "schedule": {"kind": "cosine"}},
    {"name": "adamw", "lr": 0.05, "weight_decay": 0.3, "schedule": {"kind": "linear"}},
    {"name": "adamw", "lr": 0.05, "schedule": {"kind": "exponential", "final_fraction": 0.01}},
]
IDS = ["sgd", "sgd-momentum-l2", "adam", "adam-l2-cosine", "adamw-linear", "adamw-exponential"]
TOLERANCE = {torch.float32: (1e-6, 1e-6), torch.float64: (1e-12, 1e-12)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fields", OPTIMIZERS, ids=IDS)
def test_in_place_steps_equal_torchopt_functional(fields: dict[str, Any], dtype: torch.dtype) -> None:
    """30 steps (past the 20-step schedules' end) on (3, 50) parameters: the same
    trajectory as torchopt's ``inplace=False`` update and ``apply_updates``, while the
    parameters and moments stay the same tensors."""
    spec = OptimizerSpec.model_validate(fields)
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(3, 50, generator=generator, dtype=dtype)
    ours, theirs = start.clone(), start.clone()
    optimizer, reference = build_step(spec, 20), build_optimizer(spec, 20)
    state, reference_state = optimizer.init(ours), reference.init(theirs)
    storage = ours.data_ptr()
    for _ in range(30):
        grads = torch.randn(3, 50, generator=generator, dtype=dtype)
        ours, state = optimizer.step(ours, grads.clone(), state)
        updates, reference_state = reference.update(
            grads, reference_state, params=theirs, inplace=False
        )
        theirs = torchopt.apply_updates(theirs, updates, inplace=False)
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol)
    assert ours.data_ptr() == storage and state.steps == 30
    assert (ours - start).abs().max() > 0.1  # it moved


@pytest.mark.parametrize(
    ("fields", "reference"),
    [
        ({"name": "adamw", "lr": 0.01, "weight_decay": 0.1},
         lambda p: torch.optim.AdamW([p], lr=0.01, weight_decay=0.1)),
        ({"name": "adam", "lr": 0.01, "weight_decay": 0.1},
         lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.1)),
        ({"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
         lambda p: torch.optim.SGD([p], lr=0.05, momentum=0.9, weight_decay=0.01)),
    ],
    ids=["adamw", "adam-l2", "sgd-momentum"],
)
def test_in_place_steps_equal_torch_optim(fields: dict[str, Any], reference: Any) -> None:
    """40 steps in float64 follow ``torch.optim``'s trajectory (AdamW's decay
    θ(1 − lr·w) before the Adam step is torchopt's lr·(m̂/(√v̂ + ε) + w·θ)), to 1e-6:
    torchopt's bias corrections 1 − β^t are float32, torch's float64 (measured 7e-8
    apart after 40 steps of lr 0.01; a missing weight decay moves θ by 1e-3 a step)."""
    generator = torch.Generator().manual_seed(1)
    start = torch.randn(64, generator=generator, dtype=torch.float64)
    ours, theirs = start.clone(), start.clone().requires_grad_(True)
    optimizer, torch_optimizer = build_step(OptimizerSpec.model_validate(fields), 40), reference(theirs)
    state = optimizer.init(ours)
    for _ in range(40):
        grads = torch.randn(64, generator=generator, dtype=torch.float64)
        ours, state = optimizer.step(ours, grads.clone(), state)
        theirs.grad = grads
        torch_optimizer.step()
        torch.testing.assert_close(ours, theirs.detach(), rtol=1e-6, atol=1e-6)


def test_an_expanded_gradient_is_not_written_through() -> None:
    """A gradient autograd returns as an expanded view (the gradient of a sum) is copied
    before the step uses it as scratch: the step is still torchopt's."""
    optimizer = build_step(OptimizerSpec(name="adam", lr=0.1), 10)
    reference = build_optimizer(OptimizerSpec(name="adam", lr=0.1), 10)
    params = torch.zeros(5, dtype=torch.float64)
    grads = torch.ones((), dtype=torch.float64).expand(5)
    ours, _ = optimizer.step(params.clone(), grads, optimizer.init(params))
    updates, _ = reference.update(grads, reference.init(params), params=params, inplace=False)
    torch.testing.assert_close(ours, torchopt.apply_updates(params, updates, inplace=False))


@pytest.mark.parametrize("name", ["map", "deep_ensemble"])
def test_engines_step_in_place_and_as_before(regression: Regression, name: str) -> None:
    """``map`` and ``deep_ensemble`` with AdamW under a cosine schedule, full batch: 12
    steps equal torchopt's functional steps down ``−∇f`` (float64), the state's
    parameters stay one tensor, and the start given to ``init`` is left as it was."""
    problem, inputs, targets = regression
    optimizer = {"name": "adamw", "lr": 0.05, "weight_decay": 0.1, "schedule": {"kind": "cosine"}}
    settings = {"engine": name, "batch_size": None, "epochs": 12, "optimizer": optimizer}
    if name == "deep_ensemble":
        settings["members"] = 3
    spec = METHODS.get(name).spec.model_validate(settings)
    engine = METHODS.get(name).builder()(problem, Tempering(1.0, NUM_DATA), spec)
    start = problem.init_params(torch.Generator().manual_seed(0)) + 0.5
    kept = start.clone()
    state = engine.init(start, torch.Generator().manual_seed(1))
    theirs = state.params.clone()
    reference = build_optimizer(OptimizerSpec.model_validate(optimizer), 12)
    reference_state = reference.init(theirs)
    storage = state.params.data_ptr()
    descent = torch.func.vmap(torch.func.grad(lambda p: -problem.log_posterior(p, (inputs, targets))))
    for _ in range(12):
        state, _ = engine.update(state, (inputs, targets))
        grads = descent(theirs.reshape(-1, problem.dimension)).reshape(theirs.shape)
        updates, reference_state = reference.update(
            grads, reference_state, params=theirs, inplace=False
        )
        theirs = torchopt.apply_updates(theirs, updates, inplace=False)
        torch.testing.assert_close(state.params, theirs, rtol=1e-10, atol=1e-12)
    assert state.params.data_ptr() == storage
    assert torch.equal(start, kept)
