"""The ``llm`` and ``llm8b`` benchmark cases at a tiny size (no timing limits): every
contender steps and is measured, the table renders, the 8B path runs at a scaled-down
shape on the CPU, and a CPU run of ``llm8b`` is refused. (``tests/test_benchmarks.py``
runs the whole ``--smoke`` benchmark, this case's fresh processes included.)"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("posteriors")

from benchmarks.speed.llm import case, child, gradient
from benchmarks.speed.llm.table import gradient_lines, llm8b_section, llm_section
from benchmarks.speed.run import main


def positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, dict]]:
    """Every contender on both subsets, tiny model, in this process."""
    size = child.SIZES["smoke"]
    return {
        subset: {name: child.measure(name, subset, size, "cpu", steps=2) for name in case.CONTENDERS}
        for subset in child.SUBSETS
    }


def test_every_contender_steps_on_the_same_model(measured: dict[str, dict[str, dict]]) -> None:
    """Same model and subset in every contender; positive times and memory; LoRA trains
    fewer tensors than the last layer."""
    for found in measured.values():
        assert len({(row["parameters"], row["d"]) for row in found.values()}) == 1
        for row in found.values():
            assert all(positive(s) for s in row["seconds"]) and len(row["seconds"]) == 2
            assert row["peak_bytes"] >= row["built_bytes"] > 0
            assert 0 < row["d"] < row["parameters"]
    assert measured["lora"]["floor"]["d"] < measured["last_layer"]["floor"]["d"]


def test_the_section_renders_the_ratios(measured: dict[str, dict[str, dict]]) -> None:
    """The case's rows, built from the measurements and an interleaved timing as
    :func:`case.run` builds them, render with both subsets, the goals and the SGHMC sum."""
    rows = []
    for subset, found in measured.items():
        timed = child.interleaved(subset, child.SIZES["smoke"], "cpu", repeats=2)
        assert set(timed["timings"]) == set(case.CONTENDERS)
        assert all(positive(t["median_s"]) for t in timed["timings"].values())
        for name in case.CONTENDERS:
            found[name]["interleaved_s"] = timed["timings"][name]["median_s"]
        row = case.subset_row(subset, found, timed, [1.0, 1.0, 1.0])
        assert row["step_ratio"] == timed["floor_ratio"]["median"] and positive(row["memory_ratio"])
        rows.append(row)
    chains = child.measure("sghmc", "last_layer", child.SIZES["smoke"], "cpu", chains=3, steps=1)
    chains["step_s"], chains["load_average"] = chains["seconds"][0], [1.0, 1.0, 1.0]
    row = case._chains_row(chains)
    assert row["state_bytes"] == 3 * 2 * chains["d"] * 4
    assert row["expected_bytes"] == chains["built_bytes"] + row["state_bytes"]
    text = "\n".join(llm_section({"size": "smoke", "device": "cpu", "rows": rows, "chains": row}))
    assert "LoRA r 8" in text and "last decoder layer" in text and "bayesflow / posteriors" in text
    assert "Parallel SGHMC, 3 chains" in text


@pytest.mark.slow
def test_the_gradient_part_measures_and_renders() -> None:
    """Both subsets: the bytes the problem adds and one gradient's times of the floor, one
    chain and K chains; the table renders them, and the command prints them."""
    found = [{**gradient.measure(subset, child.SIZES["smoke"], "cpu", chains=2, repeats=1),
              "load_average": [1.0, 1.0, 1.0]} for subset in child.SUBSETS]
    for row in found:
        assert row["added_bytes"] > 0 and row["frozen_bytes"] > 0 and 0 < row["d"] < row["parameters"]
        assert all(positive(row[key]) for key in ("floor_ms", "one_chain_ms", "chains_ms"))
    text = "\n".join(gradient_lines(found))
    assert "2 chains vmapped" in text and "LoRA r 8" in text and "last decoder layer" in text
    assert "step ms: plain peft/torch" in gradient.describe(found[0])


def test_the_8b_path_runs_at_a_scaled_shape() -> None:
    """Llama 3 8B's code path (key-value heads, bfloat16 weights built on the device, the
    last layer trainable, chains of SGHMC) at a tiny shape on the CPU; the real shape's
    sizes on the meta device: 8.03B parameters, a last layer of 218,112,000."""
    scaled = child.measure("sghmc", "last_layer", child.SIZES["llama3_8b_scaled"], "cpu", chains=2, steps=1)
    model, names = child.build_model(child.SIZES["llama3_8b_scaled"], "last_layer", "cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config.num_key_value_heads == 1 and all(".layers.1." in name for name in names)
    assert model.config._attn_implementation == "eager"
    assert scaled["d"] == sum(dict(model.named_parameters())[name].numel() for name in names)
    row = case._chains_row({**scaled, "step_s": scaled["seconds"][0], "load_average": [1.0] * 3})
    assert "2 chains of SGHMC" in "\n".join(llm8b_section({"device": "cpu", "chains": row}))
    full, names = child.build_model(child.LLAMA3_8B, "last_layer", "meta")
    values = dict(full.named_parameters())
    assert sum(value.numel() for value in values.values()) == 8_030_261_248
    assert sum(values[name].numel() for name in names) == 218_112_000


def test_llm8b_is_refused_on_a_cpu() -> None:
    """``--cases llm8b`` without ``--device cuda`` stops with a message, before any work."""
    with pytest.raises(SystemExit, match="llm8b.*one GPU only; add --device cuda"):
        main(["--smoke", "--cases", "llm8b"])


def test_a_language_model_problem_holds_no_prior_vectors_over_d() -> None:
    """The LM problem's N(0, v) prior is bound compact: its precision is a view of one
    number, so the state, its moments and the gradient are the only d-vectors a MAP fit
    adds to the model (what the ``llm`` case's memory ratio measures)."""
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.priors import diag_normal

    model, names = child.build_model(child.SIZES["smoke"], "last_layer", "cpu")
    problem = build_lm_problem(model, names, diag_normal(0.5), 8, 4)
    assert problem.prior_precision.shape == (problem.dimension,)
    assert problem.prior_precision.stride() == (0,) and float(problem.prior_precision[0]) == 2.0
