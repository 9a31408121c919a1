"""With `noise_sd: auto` the regression predictive adds the evidence-chosen noise."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import bayesflow
import bayesflow.variants
from bayesflow.dag.cache import Cache
from bayesflow.engines.base import Posterior
from bayesflow.stages import POSTERIOR_FILE, StageRunner
from bayesflow.tracking import InMemoryTracker
from tests.conftest import write
from tests.stages.test_evidence_stage import REGRESSION

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

# The evidence stage test's linear regression on diabetes, its spec noise far from the
# chosen one, and enough draws for a Monte Carlo predictive close to its closed form.
SPEC = REGRESSION.replace("noise_sd: 0.7", "noise_sd: 0.3").replace("n_samples: 4}", "n_samples: 4000}")


def gaussian_nll(mean: np.ndarray, variance: np.ndarray, targets: np.ndarray) -> float:
    """Mean over points of −log N(yᵢ; mᵢ, sᵢ²)."""
    return float(np.mean(0.5 * np.log(2 * math.pi * variance) + 0.5 * (targets - mean) ** 2 / variance))


def test_regression_predictive_uses_the_chosen_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear regression: the test NLL is that of N(x̃θ*, x̃Σx̃ᵀ + σ*²) with the chosen σ*,
    at T = 0.1 and 1 (Σ = T · (X̃ᵀX̃/σ*² + I/v*)⁻¹, the posterior the fit saved), not of
    the spec's σ = 0.3.

    The evaluation's predictive is a mixture of 4,000 Gaussians N(x̃θₛ, σ*²) over posterior
    draws θₛ (seeded), which is N(x̃θ*, x̃Σx̃ᵀ + σ*²) up to Monte Carlo error: x̃Σx̃ᵀ is under
    9% of σ*² here (σ* ≈ 0.69), so a point's density varies by well under 60% between draws
    and the mean over ~110 points of the log of its mean over 4,000 draws is off by about
    1e-3 at most (measured: 8e-5 at T = 0.1, 3e-4 at T = 1); the spec's σ gives an NLL more
    than 1.2 away.
    """
    assert "noise_sd: 0.3" in SPEC and "n_samples: 4000" in SPEC  # the replacements took
    monkeypatch.chdir(tmp_path)
    loaded = bayesflow.load(write(tmp_path, SPEC))
    result = bayesflow.run(loaded, tracker=InMemoryTracker())
    assert result.exit_code == 0, result.outcome.errors
    table = result.results().set_index(["method", "temperature"]).loc["laplace_auto"]
    noise = float(table.loc[1.0, "noise_sd_chosen"])
    assert table["noise_sd_chosen"].nunique() == 1 and abs(noise - 0.3) > 0.1
    plan = bayesflow.plan(loaded)
    cache = Cache(loaded.spec.execution.cache_dir)
    data = StageRunner(loaded, bayesflow.variants.load_data(loaded)).dataset
    design = np.concatenate([np.asarray(data.x_test, dtype=np.float64), np.ones((len(data.x_test), 1))], 1)
    targets = np.asarray(data.y_test, dtype=np.float64)
    for temperature in (0.1, 1.0):
        stage = plan.stages[f"fit/laplace_auto/T={temperature:g}/seed=0"]
        posterior = Posterior.from_arrays(dict(np.load(cache.get(stage.key).file(POSTERIOR_FILE))))
        assert posterior.mean is not None and posterior.cov is not None
        mean = design @ posterior.mean.double().numpy()
        epistemic = np.einsum("ij,jk,ik->i", design, posterior.cov.double().numpy(), design)
        assert epistemic.max() < 0.1 * noise**2
        expected = gaussian_nll(mean, epistemic + noise**2, targets)
        assert float(table.loc[temperature, "test_nll"]) == pytest.approx(expected, abs=1e-3)
        assert abs(gaussian_nll(mean, epistemic + 0.3**2, targets) - expected) > 0.5
