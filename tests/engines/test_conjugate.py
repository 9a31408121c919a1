"""``conjugate_linear``: the closed form it computes equals the textbook posterior."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bayesflow.errors import StageError
from bayesflow.methods import METHODS
from bayesflow.temperature import Tempering
from tests.engines.helpers import NUM_DATA, Regression, exact, run

# The closed-form check of conjugate_linear (from two starting points) is a row of test_closed_form.CLOSED_FORM.


def test_zero_temperature_is_the_point_mass_at_the_mode(regression: Regression) -> None:
    """At T = 0 the covariance vanishes and the mean is the posterior mode."""
    posterior = run("conjugate_linear", regression, 0.0, "posterior")
    assert posterior.cov is not None and not posterior.cov.any()
    torch.testing.assert_close(posterior.mean, exact(*regression[1:], 1.0, "posterior").mean)


def test_posterior_before_the_update_is_an_error(regression: Regression) -> None:
    """Asking an unfitted state for its posterior says what to do."""
    method = METHODS.get("conjugate_linear")
    engine = method.builder()(
        regression[0], Tempering(1.0, NUM_DATA), method.spec.model_validate({"engine": "conjugate_linear"})
    )
    state = engine.init(torch.zeros(3, dtype=torch.float64), torch.Generator())
    with pytest.raises(StageError, match="fit"):
        engine.posterior(state)


def test_module_imports_without_torch() -> None:
    """The spec layer imports the module; torch stays unloaded."""
    code = (
        "import sys, bayesflow.methods.conjugate\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model={name: mlp}", "conjugate_linear is exact only for model linear, but `model.name` is 'mlp'"),
        ("prior={name: laplace}", "exact only for prior diag_normal or he_normal or none"),
        ("likelihood={name: bernoulli}", "conjugate_linear does not apply to classification"),
    ],
)
def test_the_spec_refuses_pairings_without_a_closed_form(override: str, message: str) -> None:
    """At validate, the linear_regression workflow with another model, a non-Gaussian prior
    or another likelihood is a located error on the method's engine key."""
    from bayesflow.errors import SpecError
    from bayesflow.spec import load_spec

    with pytest.raises(SpecError) as caught:
        load_spec("linear_regression", [override])
    found = [problem for problem in caught.value.problems if "methods.exact.engine" in problem]
    assert found and message in found[0], caught.value.problems
