"""Typed artefacts: a round trip through the cache's values and files, and the results
table the plot and report stages build from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bayesflow.dag.cache import Cache
from bayesflow.stages.artefacts import (
    POSTERIOR_FILE,
    CurvatureArtefact,
    EvaluationArtefact,
    FitArtefact,
    PlotArtefact,
    ReportArtefact,
    read,
    read_inputs,
)
from bayesflow.stages.table import results_table

CELLS = [
    {"cell": f"fit/{method}/T={label}/seed=0", "evaluation": f"evaluate/{method}/T={label}/seed=0",
     "method": method, "engine": engine, "temperature": temperature, "seed": 0}
    for method, engine, temperature, label in (
        ("map", "map", None, "shared"), ("sghmc", "sghmc", 1.0, "1"), ("laplace", "laplace_diag_ggn", 1.0, "1"),
    )
]


def commit(cache: Cache, key: str, files: dict[str, bytes], artefact_of: object) -> object:
    """Write ``files`` into a staging folder, build the artefact there, commit it, and
    read it back from the entry."""
    staging = cache.staging(key)
    for name, content in files.items():
        (staging / name).write_bytes(content)
    artefact = artefact_of(staging)  # type: ignore[operator]
    return cache.commit(key, staging, artefact.values()), artefact


@pytest.mark.parametrize("kind", ["fit", "curvature", "evaluate", "plot", "report"])
def test_artefacts_round_trip_through_the_cache(tmp_path: Path, kind: str) -> None:
    """An artefact read back from its entry equals it, its paths in the entry's folder."""
    makers = {
        "fit": ({POSTERIOR_FILE: b"x"}, lambda folder: FitArtefact(
            folder / POSTERIOR_FILE, 1.5, 10, [3.0, 2.0], {"step_size": [0.1]}, {"ratio": 1.0})),
        "curvature": ({"curvature.npz": b"x"}, lambda folder: CurvatureArtefact(folder / "curvature.npz", 0.5, 3)),
        "evaluate": ({"evaluation.npz": b"x"}, lambda folder: EvaluationArtefact(
            {"test_nll": 0.3}, {"test_nll": "mean"}, folder / "evaluation.npz")),
        "plot": ({"nll.png": b"x"}, lambda folder: PlotArtefact(folder / "nll.png")),
        "report": ({"report.ipynb": b"x", "report.html": b"y"}, lambda folder: ReportArtefact(
            folder / "report.ipynb", folder / "report.html", folder / "bundle")),
    }
    files, maker = makers[kind]
    entry, _ = commit(Cache(tmp_path), "k", files, maker)
    assert read(kind, entry) == maker(entry.folder)  # type: ignore[attr-defined]


def test_old_fit_values_are_read(tmp_path: Path) -> None:
    """A fit entry written before artefacts were typed (no traces) is read as a fit."""
    cache = Cache(tmp_path)
    staging = cache.staging("old")
    (staging / POSTERIOR_FILE).write_bytes(b"x")
    entry = cache.commit("old", staging, {"fit_seconds": 2, "steps": 5, "history": [1.0]})
    (fit,) = read_inputs({"fit/m/T=1/seed=0": entry}).values()
    assert isinstance(fit, FitArtefact) and fit.traces == {} and fit.series() == {"train_loss": [1.0]}


def test_results_table_lists_every_cell_with_its_status(tmp_path: Path) -> None:
    """Finished cells carry fit and evaluation metrics; a failed fit and a skipped
    evaluation are rows with their status and error; a shared fit is at temperature 0."""
    fit = FitArtefact(tmp_path / POSTERIOR_FILE, 1.0, 4, [2.0, 1.0], {"kinetic_temperature_ratio": [1.1]})
    artefacts = {
        CELLS[0]["cell"]: fit, CELLS[0]["evaluation"]: EvaluationArtefact({"test_nll": 0.5}),
        CELLS[2]["cell"]: fit,
    }
    missing = {
        CELLS[1]["cell"]: {"status": "failed", "error": "diverged"},
        CELLS[1]["evaluation"]: {"status": "skipped", "error": "needs fit/sghmc/T=1/seed=0"},
        CELLS[2]["evaluation"]: {"status": "skipped", "error": "needs fit/nuts/T=1/seed=0"},
    }
    frame = results_table(CELLS, artefacts, missing).set_index("method")
    assert list(frame.columns[:5]) == ["engine", "temperature", "temperature_shared", "seed", "status"]
    assert frame.loc["map", "status"] == "FINISHED" and frame.loc["map", "test_nll"] == 0.5
    assert frame.loc["map", "temperature"] == 0.0 and frame.loc["map", "temperature_shared"]
    assert frame.loc["map", "train_loss"] == 1.0 and frame.loc["map", "trace/kinetic_temperature_ratio"] == 1.1
    assert (frame.loc["sghmc", "status"], frame.loc["sghmc", "error"]) == ("FAILED", "diverged")
    assert frame.loc["laplace", "status"] == "SKIPPED" and np.isnan(frame.loc["laplace", "test_nll"])
    assert list(frame.columns[-2:]) == ["cell", "error"]
