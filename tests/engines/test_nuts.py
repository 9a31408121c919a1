"""Full-batch NUTS through pyro: the closed-form posterior, and its refusals."""

from __future__ import annotations

import sys

import pytest
import torch

from bayesflow.errors import MissingDependencyError, StageError
from bayesflow.methods import METHODS
from bayesflow.temperature import Tempering
from tests.engines.helpers import NUM_DATA, WARM_AND_COLD, Regression, exact, run


@pytest.mark.slow
@pytest.mark.parametrize(("temperature", "convention"), WARM_AND_COLD)
def test_nuts_samples_the_posterior(
    regression: Regression, temperature: float, convention: str
) -> None:
    """NUTS's draws have the tempered posterior's mean and covariance."""
    target = exact(regression[1], regression[2], temperature, convention)
    config = {"warmup": 200, "num_samples": 400}
    samples = run("nuts", regression, temperature, convention, target.mean, **config).samples
    assert samples is not None and samples.shape == (400, 3)
    sd = target.marginal_var.sqrt()
    # Over seeds 0-5 at both temperatures (measured): the mean within 0.12 sd, the
    # variances within 22%, the correlations within 0.12 of the exact ones.
    assert ((samples.mean(0) - target.mean).abs() / sd).max() < 0.25
    torch.testing.assert_close(samples.var(0), target.marginal_var, rtol=0.3, atol=0)
    correlation = torch.corrcoef(samples.T)
    expected = target.cov / (sd.unsqueeze(0) * sd.unsqueeze(1))
    torch.testing.assert_close(correlation, expected, rtol=0, atol=0.2)


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
