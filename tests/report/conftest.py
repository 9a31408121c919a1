"""Shared fixtures of the report tests: a synthetic results frame."""

from __future__ import annotations

import math
from collections.abc import Iterator

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt

TEMPERATURES = (0.1, 1.0, 3.0)
SEEDS = (0, 1)
FAILED_CELL = ("sghmc", 3.0, 1)  # method, temperature, seed of the one failed fit


def synthetic_results() -> pd.DataFrame:
    """Three methods (MAP at temperature 0, Laplace, SGHMC), 3 temperatures, 2 seeds."""
    rows = []
    grid = [("map", "map", (0.0,))]
    grid += [("laplace", "laplace_diag_ggn", TEMPERATURES), ("sghmc", "sghmc", TEMPERATURES)]
    for method, engine, temperatures in grid:
        for temperature in temperatures:
            for seed in SEEDS:
                failed = (method, temperature, seed) == FAILED_CELL
                nll = 0.30 + 0.05 * math.log1p(temperature) + 0.01 * seed
                rows.append(
                    {
                        "method": method,
                        "engine": engine,
                        "temperature": temperature,
                        "temperature_shared": method == "map",
                        "seed": seed,
                        "status": "FAILED" if failed else "FINISHED",
                        "test_nll": math.nan if failed else nll,
                        "test_accuracy": math.nan if failed else 0.9 - 0.01 * temperature,
                        "test_ece": math.nan if failed else 0.05 + 0.001 * seed,
                        "test_brier": math.nan if failed else 0.12,
                        "fit_seconds": 1.5,
                        "steps": 100,
                        "cell": f"fit/{method}/T={temperature:g}/seed={seed}",
                        "error": "diverged" if failed else "",
                        "run_id": f"run-{len(rows)}",
                    }
                )
    return pd.DataFrame(rows)


@pytest.fixture
def results_frame() -> pd.DataFrame:
    """The synthetic results frame."""
    return synthetic_results()


@pytest.fixture(autouse=True)
def close_figures() -> Iterator[None]:
    """Close every figure a test opened."""
    yield
    plt.close("all")
