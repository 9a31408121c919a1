"""Full-batch NUTS through pyro: the closed-form posterior, and its refusals."""

from __future__ import annotations

import sys

import pytest
import torch

from bayesflow.errors import MissingDependencyError, StageError
from bayesflow.methods import METHODS
from bayesflow.temperature import Tempering
from tests.engines.helpers import NUM_DATA, Regression, run

# The closed-form check of NUTS is a row of test_closed_form.CLOSED_FORM.


def test_nuts_refuses_zero_temperature(regression: Regression) -> None:
    """At T = 0 the target is a point mass: the error says to drop 0 or use map."""
    assert METHODS.get("nuts").traits.positive_temperature
    spec = METHODS.get("nuts").spec.model_validate({"engine": "nuts"})
    with pytest.raises(StageError, match="T = 0.*drop 0 from `temperatures`.*`map`"):
        METHODS.get("nuts").builder()(regression[0], Tempering(0.0, NUM_DATA), spec)


def test_nuts_without_pyro_names_the_extra(
    regression: Regression, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without pyro, building the engine says which extra to install."""
    monkeypatch.setitem(sys.modules, "pyro", None)
    monkeypatch.setitem(sys.modules, "pyro.infer", None)
    spec = METHODS.get("nuts").spec.model_validate({"engine": "nuts"})
    with pytest.raises(MissingDependencyError, match=r"pip install 'bayesflow-workflows\[nuts\]'"):
        METHODS.get("nuts").builder()(regression[0], Tempering(1.0, NUM_DATA), spec)


def test_nuts_leaves_the_global_random_state_alone(regression: Regression) -> None:
    """Sampling draws its seeds from the fit's generator, not torch's global one."""
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    run("nuts", regression, 1.0, "posterior", warmup=5, num_samples=5)
    assert torch.equal(torch.random.get_rng_state(), before)
