"""The benchmark (benchmarks/) runs in its smoke mode and writes every case; no timing limits."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("posteriors")

from benchmarks.speed.report import END, START
from benchmarks.speed.run import CASES, main

# Real workflow runs (MLflow, the report kernel): left out of `make test-fast`.
pytestmark = pytest.mark.slow


def positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("bench")
    main(["--smoke", "--out", str(folder), "--doc", str(folder / "benchmarks.md")])
    (written,) = folder.glob("*-cpu-smoke.json")
    return json.loads(written.read_text()), folder


def test_smoke_json_has_every_case(smoke: tuple[dict[str, Any], Path]) -> None:
    """The JSON holds every case, the machine and the targets."""
    results, _ = smoke
    assert set(CASES) <= set(results)
    assert results["machine"]["posteriors"].startswith("0.1")
    assert {target["target"].split(" ")[0] for target in results["targets"]} >= {
        "SGHMC",
        "VI",
        "Tracking",
        "No-op",
        "Default",
        "10-chain",
    }


def test_smoke_json_records_provenance(smoke: tuple[dict[str, Any], Path]) -> None:
    """Commit, machine, device, load average and library versions are in every results file."""
    machine = smoke[0]["machine"]
    assert machine["bayesflow_revision"] != "unknown"
    assert machine["cpu"] and machine["cores"] >= 1 and len(machine["load_average"]) == 3
    assert machine["device"] == "cpu"
    assert set(machine["versions"]) >= {"python", "torch", "torchopt", "posteriors", "mlflow"}


def test_smoke_pima_timings_are_positive(smoke: tuple[dict[str, Any], Path]) -> None:
    """Every Pima step and chain row has positive timings for both libraries."""
    pima = smoke[0]["pima"]
    assert {row["method"] for row in pima["per_step"]} >= {"sghmc", "vi_diag", "laplace_diag_ggn"}
    for row in pima["per_step"]:
        assert positive(row["bayesflow_s"]) and positive(row["posteriors_s"]), row
    assert {row["chains"] for row in pima["chains"]} == {1, 10}
    for row in pima["chains"]:
        rates = row["chain_steps_per_s"]
        assert set(rates) == {"bayesflow", "posteriors_stacked", "posteriors_looped", "floor"}
        assert all(positive(rate) for rate in rates.values()), row
        assert positive(row["speedup_vs_stacked"]["median"])
        assert positive(row["ratio_vs_floor"]["median"])


def test_smoke_digits_grids_and_workflow_are_positive(smoke: tuple[dict[str, Any], Path]) -> None:
    """Digits epochs, the grids, the paper's case and the workflow all have positive times."""
    results = smoke[0]
    assert {row["method"] for row in results["digits"]["per_epoch"]} == {
        "map",
        "vi_diag",
        "sghmc",
        "laplace_diag_ggn",
    }
    for row in results["digits"]["per_epoch"]:
        assert positive(row["bayesflow_s"]) and positive(row["posteriors_s"]), row
    grids = results["grids"]
    assert positive(grids["laplace_grid"]["fit_ratio"]["median"])
    sghmc = grids["sghmc_grid"]
    assert positive(sghmc["ratio"])
    assert {"fit_group", "fit", "evaluate"} <= set(sghmc["grid_stage_s"])
    assert positive(sghmc["per_step"]["floor_ratio"]["median"])
    assert positive(grids["paper_parallel_sghmc"]["wall_s"])
    workflow = results["workflow"]
    assert positive(workflow["wall_s"]) and positive(workflow["compute_s"])
    assert 0 <= workflow["tracking_report_share"] <= 1
    assert positive(workflow["rerun_wall_s"]) and positive(workflow["stage_time_s"])


def test_smoke_doc_has_the_tables_between_markers(smoke: tuple[dict[str, Any], Path]) -> None:
    """The Markdown table is written between the markers a rerun replaces."""
    text = (smoke[1] / "benchmarks.md").read_text()
    assert START in text and END in text and "### Targets" in text
    assert "fit_group" in text and "floor" in text and "stacked" in text


def test_floor_steps_like_bayesflow() -> None:
    """At T = 0 (no noise) the hand-written floor's steps equal bayesflow's engine's."""
    from benchmarks.common.peers import HYPER, Stepper, bayesflow_engine, bayesflow_state
    from benchmarks.common.problems import pima
    from benchmarks.speed.chains import chain_batches
    from benchmarks.speed.floor import FloorSGHMC

    setup = pima()
    for batch_size in (None, 32):
        engine = bayesflow_engine(setup, "sghmc", temperature=0.0, batch_size=batch_size, chains=3)
        state = bayesflow_state(engine, setup)
        batches = chain_batches(setup, batch_size, engine.streams)
        floor = FloorSGHMC(
            setup,
            state.params,
            state.momenta,
            batches,
            lr=HYPER["sghmc"]["lr"],
            alpha=HYPER["sghmc"]["alpha"],
            temperature=0.0,
        )
        ours = Stepper(engine.update, state, batches)
        for _ in range(5):
            ours()
            floor()
        torch.testing.assert_close(floor.params, ours.state.params, rtol=1e-5, atol=1e-6)


def test_timing_paired_ratio_and_spread() -> None:
    """A paired ratio divides repeat by repeat; the spread is half the IQR over the median."""
    from benchmarks.common.timing import Timing, paired_ratio

    ratio = paired_ratio(Timing([2.0, 4.0, 6.0]), Timing([1.0, 2.0, 2.0]))
    assert ratio["median"] == 2.0 and ratio["min"] == 2.0 and ratio["max"] == 3.0
    assert Timing([1.0, 1.0, 1.0]).spread == 0.0


def test_fresh_state_owns_its_defaults() -> None:
    """posteriors' shared class-default `step` does not leak through an in-place update."""
    from benchmarks.common.peers import fresh, import_posteriors

    sghmc = import_posteriors().sgmcmc.sghmc
    transform = sghmc.build(lambda p, b: ((p * b).sum(), torch.tensor([])), lr=0.1, temperature=0.0)
    state = fresh(sghmc.init(torch.zeros(3), 0.0))
    transform.update(state, torch.ones(3), inplace=True)
    assert int(state.step) == 1
    assert int(sghmc.init(torch.zeros(3), 0.0).step) == 0


def test_timing_tracker_delegates_and_counts() -> None:
    """The timing wrapper returns the wrapped tracker's answers and counts each call."""
    from bayesflow.tracking import InMemoryTracker
    from benchmarks.speed.workflow import TimingTracker

    tracker = TimingTracker(InMemoryTracker())
    run_id = tracker.start_run("experiment", "run")
    tracker.log_metrics(run_id, {"loss": 1.0})
    assert tracker.get_run(run_id).metrics == {"loss": 1.0}
    assert tracker.uri == "memory://"
    assert tracker.calls["start_run"] == 1 and tracker.total >= 0


def test_smoke_kfac_rows_agree_with_laplace_torch(smoke: tuple[dict[str, Any], Path]) -> None:
    """The KFAC rows time both libraries, whose Kronecker factors agree."""
    rows = smoke[0]["kfac"]["rows"]
    assert {row["method"] for row in rows} == {"laplace_kfac_ggn", "laplace_kfac_fisher"}
    for row in rows:
        assert positive(row["timings"]["bayesflow"]["median_s"]), row
        assert positive(row["timings"]["laplace_torch"]["median_s"]), row
        # float32 sums over 898 examples in two orders: agreement to about 1e-6.
        assert row["factor_difference"] < 1e-4, row
