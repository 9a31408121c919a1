"""The ``trunk`` benchmark case at a tiny size (no timing limits): every contender steps on
both regimes, the shared trunk reads windows met before back, the scoring agrees between
the shared trunk and the whole forward, and the case's section renders its goals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from benchmarks.speed.llm.child import SIZES as LLM_SIZES
from benchmarks.speed.llm.child import build_model
from benchmarks.speed.run import main
from benchmarks.speed.trunk import case, child
from benchmarks.speed.trunk.table import trunk_section


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, dict]]:
    """Every contender on both subsets and the scoring, tiny model, 3 chains, in this process
    on one thread, as the case runs them (two threads on two loaded cores took 79 s, not 3)."""
    size = child.SIZES["smoke"]
    found: dict[str, dict[str, dict]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for subset in child.TRAINABLE:
            found[subset] = {name: child.measure(name, subset, size, "cpu", chains=3) for name in child.CONTENDERS}
            found[subset]["scoring"] = child.score(subset, size, "cpu", chains=3, repeats=1)
    finally:
        torch.set_num_threads(threads)
    return found


def test_the_smollm2_shape_is_built_tied_in_float32() -> None:
    """SmolLM2-135M's shape on the meta device: 134,515,008 parameters (the output layer
    tied to the embeddings, counted once), float32, 3 key-value heads, rope θ 100,000."""
    model, names = build_model(LLM_SIZES["smollm2"], "last_layer", "meta", child.TRAINABLE["last_layer"](30))
    assert sum(value.numel() for value in model.parameters()) == 134_515_008
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert next(model.parameters()).dtype.itemsize == 4 and model.config.num_key_value_heads == 3
    assert model.config.rope_parameters["rope_theta"] == 100000.0
    assert all(name.startswith("model.layers.29.") for name in names)


def test_the_shared_trunk_reads_seen_windows_back(measured: dict[str, dict[str, dict]]) -> None:
    """Trunk contenders run each new window through the trunk once and no seen window; the
    whole-forward contenders have no trunk; every step is timed."""
    size = child.SIZES["smoke"]
    for found in measured.values():
        for name in child.CONTENDERS:
            row = found[name]
            assert all(s > 0 for regime in case.REGIMES for s in row["seconds"][regime])
            assert row["peak_bytes"] >= row["built_bytes"] > 0 and row["d"] == found["chains"]["d"]
            assert row["shared_trunk"] == (name in ("one_chain", "chains"))
            computed = row["computed"]
            assert computed == ({"new": 2 * size["windows"], "seen": 0} if row["shared_trunk"] else {"new": 0, "seen": 0})
        assert found["chains"]["trunk_start"] == size["layers"] - 1


def test_the_scoring_agrees_and_keeps(measured: dict[str, dict[str, dict]]) -> None:
    """Shared trunk and whole forward give the same log probabilities; a second scoring on
    the shared trunk runs no statement through it."""
    for found in measured.values():
        scoring = found["scoring"]
        assert scoring["max_log_prob_difference"] < 1e-4
        for key, row in scoring["timings"].items():
            assert row["first_s"] > 0 and row["again_s"] > 0
            expected = {"first": child.STATEMENTS, "again": 0} if key.startswith("shared") else {"first": 0, "again": 0}
            assert row["computed"] == expected


@pytest.mark.slow
def test_the_section_renders_the_goals(measured: dict[str, dict[str, dict]]) -> None:
    """Rows built as :func:`case.run` builds them render both subsets, both regimes, the
    goals and the memory sum."""
    rows = []
    for subset, found in measured.items():
        contenders = {name: found[name] for name in child.CONTENDERS}
        scoring = {**found["scoring"], "load_average": [1.0, 1.0, 1.0]}
        row = case.subset_row(subset, contenders, scoring, [1.0, 1.0, 1.0])
        chains = found["chains"]
        assert row["expected_bytes"] == chains["built_bytes"] + 3 * 2 * chains["d"] * 4 + chains["kept_bytes"]
        assert chains["kept_bytes"] > 0 and row["ratios"]["seen"]["members_over_chains"] > 0
        rows.append(row)
    text = "\n".join(trunk_section({"size": "smoke", "device": "cpu", "chains": 3, "goals": case.GOALS,
                                    "rows": rows}))
    assert "last decoder layer" in text and "LoRA r 8, α 16" in text
    assert "windows seen before" in text and "b / a (≤ 1.5)" in text and "d / b (≥ 5)" in text
    assert "(b) / sum (≤ 1.2)" in text and "shared 3 / 1" in text


@pytest.mark.slow
def test_the_case_runs_from_the_command_line(tmp_path: Path) -> None:
    """``--smoke --cases trunk``: ten fresh processes, one results file, the section in the doc."""
    results = main(["--smoke", "--cases", "trunk", "--out", str(tmp_path), "--doc", str(tmp_path / "doc.md")])
    rows = results["trunk"]["rows"]
    assert [row["subset"] for row in rows] == list(child.TRAINABLE) and "failed" not in results
    assert all(row["contenders"]["chains"]["computed"]["seen"] == 0 for row in rows)
    text = (tmp_path / "doc.md").read_text()
    assert "### The shared trunk (issue 31)" in text and "size `smoke`" in text
    assert len(list(tmp_path.glob("*-cpu-smoke.json"))) == 1
