"""The peer-parity benchmark (benchmarks/parity/run.py) runs at a tiny size and records everything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("posteriors")

from benchmarks.parity.fits import Settings
from benchmarks.parity.noise import parameters, shared_noise
from benchmarks.parity.peer import fit_posteriors
from benchmarks.parity.problem import draw, load
from benchmarks.parity.run import END, START, main
from benchmarks.parity.stats import paired_gap

TINY = ["--quick", "--seeds", "1", "--epochs", "2", "--methods", "map", "--temperatures", "1"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("parity")
    main([*TINY, "--out", str(folder), "--doc", str(folder / "parity.md")])
    (written,) = folder.glob("*-quick.json")
    return json.loads(written.read_text()), folder


@pytest.mark.slow  # the quick run: 3-10 s on the shared 2-core machine, by its load
def test_json_records_provenance(quick: tuple[dict[str, Any], Path]) -> None:
    """The JSON holds the commit, the machine, the library versions and the settings."""
    results, _ = quick
    assert len(results["commit"]["head"]) == 40
    assert isinstance(results["commit"]["uncommitted"], list)
    assert {"cpu", "cores", "load_average_start", "load_average_end"} <= set(results["machine"])
    assert {"torch", "posteriors", "bayesflow"} <= set(results["versions"])
    settings = results["settings"]
    assert settings["seeds"] == [0] and settings["epochs"] == 2 and settings["batch_size"] == 32
    assert settings["prior"] == {"name": "diag_normal", "variance": 1 / 40}
    assert settings["model"]["hidden"] == [64, 64] and settings["evaluation_samples"] == 50
    assert results["targets"] == {"test_nll": 0.03, "test_accuracy": 0.015}
    assert results["checks"]["plain_torch_starts_equal"] is True
    assert results["runtime_seconds"] > 0


@pytest.mark.slow  # the quick run: 3-10 s on the shared 2-core machine, by its load
def test_json_cell_has_both_tools_and_the_gap(quick: tuple[dict[str, Any], Path]) -> None:
    """The one cell has each tool's per-seed metrics, their spread and the paired gap."""
    results, _ = quick
    (cell,) = results["cells"]
    assert cell["method"] == "map" and cell["temperature"] is None
    (row,) = cell["per_seed"]
    for tool in ("bayesflow", "posteriors"):
        assert {"test_nll", "test_accuracy", "test_ece", "seconds", "steps"} <= set(row[tool])
        assert row[tool]["steps"] == 2 * 29
        assert {"mean", "standard_error", "min", "max"} <= set(cell["summary"][tool]["test_nll"])
    for metric in ("test_nll", "test_accuracy"):
        gap = cell["summary"]["gap"][metric]
        assert {"mean", "standard_error", "t", "p_value", "ci95", "status"} <= set(gap)
        assert gap["status"] == "within"  # the same start and batches give the same MAP
    assert results["checks"]["map_max_abs_difference"][0] < 1e-4


@pytest.mark.slow  # the quick run: 3-10 s on the shared 2-core machine, by its load
def test_doc_block_has_the_table(quick: tuple[dict[str, Any], Path]) -> None:
    """The doc gets the results block between its markers, with the table."""
    _, folder = quick
    text = (folder / "parity.md").read_text()
    assert text.count(START) == 1 and text.count(END) == 1
    assert "| MAP | any |" in text


def test_stacked_chains_equal_separate_chains() -> None:
    """posteriors' chains stacked in one tree follow the same paths as separate states."""
    digits = load()
    settings = Settings(epochs=1, batch_size=300, chains=2, temperatures=(0.0,))
    draws = draw(digits, 0, settings.chains, settings.epochs)
    fits = {
        peer: fit_posteriors(
            digits,
            "sghmc_parallel",
            0.0,
            draws,
            Settings(**{**settings.__dict__, "peer_chains": peer}),
            seed=0,
        )
        for peer in ("stacked", "loop")
    }
    stacked, looped = (fits[peer][0.0].posterior.samples for peer in ("stacked", "loop"))
    assert stacked is not None and looped is not None
    assert not torch.equal(draws.starts[0], draws.starts[1])
    torch.testing.assert_close(stacked, looped, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ["vi_diag", "sghmc_serial", "sghmc_parallel"])
def test_same_noise_gives_the_same_fit(method: str) -> None:
    """Fed bayesflow's noise as well as its starts and batches, posteriors fits the same."""
    digits = load()
    settings = Settings(epochs=1, batch_size=300, chains=2, temperatures=(1.0,))
    chains = settings.chains if method == "sghmc_parallel" else 1
    draws = draw(digits, 0, chains, 2 * settings.epochs)
    fits = shared_noise(digits, method, 1.0, draws, settings, seed=0)
    torch.testing.assert_close(
        parameters(fits["bayesflow"]), parameters(fits["posteriors"]), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        ([0.50, 0.52, 0.51], [0.49, 0.50, 0.51], "within"),
        ([0.60, 0.70, 0.50], [0.50, 0.50, 0.50], "outside"),
        ([0.60, 0.61, 0.62], [0.50, 0.50, 0.50], "significantly outside"),
    ],
)
def test_gap_status(ours: list[float], theirs: list[float], expected: str) -> None:
    """A gap is within the target, outside it, or outside it beyond its 95% interval."""
    assert paired_gap(ours, theirs, 0.03)["status"] == expected
