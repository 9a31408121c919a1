"""Sweeps loaded, planned and executed: variants validated, stages named per variant,
equal keys computed once, data loaded once per data block, results labelled by variant."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas
import pytest

import bayesflow
from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.plan import Stage
from bayesflow.dag.scheduler import execute
from bayesflow.errors import SpecError
from bayesflow.spec.sweep import MAX_VARIANTS, load_sweep, variant_tag
from bayesflow.stages.table import results_table
from tests.conftest import TINY_SPEC, write

NO_REPORT = ["report.enabled=false", "plots=[]"]


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    return write(tmp_path, TINY_SPEC)


def test_each_variant_is_the_spec_with_its_overrides(spec_path: Path) -> None:
    """Two swept keys make four variants, each validated with its own values."""
    sweep = bayesflow.load(spec_path, ["prior.variance=0.1,1", "model.hidden=[4],[8,8]"], multirun=True)
    assert sweep.keys == ("prior.variance", "model.hidden")
    got = [(v.loaded.spec.prior.variance, v.loaded.spec.model.hidden) for v in sweep.variants]
    assert got == [(0.1, [4]), (0.1, [8, 8]), (1.0, [4]), (1.0, [8, 8])]
    assert [v.label for v in sweep.variants][1] == "prior.variance=0.1 model.hidden=[8,8]"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["methods.map.epochs=2"], r"-m \(multirun\) needs an override that sweeps"),
        (["temperatures=0.1,1"], r"`temperatures` cannot be swept: .*`temperatures=\[0.1,1\]`"),
        (["seeds=0,1"], r"`seeds` cannot be swept: .*`seeds=\[0,1\]`"),
        (["report.enabled=true,false"], r"`report.enabled` cannot be swept"),
        (["prior.variance=0.1,-1"],
         r"variant 2 of 2 \(prior.variance=-1\): .*override 'prior.variance=-1'.*prior.variance"),
        (["prior.varianse=0.1,1"], r"variant 1 of 2 .*no key `prior.varianse`; did you mean `prior.variance`"),
        ([f"methods.map.epochs=range(1,{MAX_VARIANTS + 2})"], f"more than {MAX_VARIANTS}"),
    ],
)
def test_bad_sweeps_are_located_spec_errors(spec_path: Path, overrides: list[str], message: str) -> None:
    """Each mistake is a SpecError (exit 3) that names the variant, the key and the fix."""
    with pytest.raises(SpecError, match=message) as caught:
        load_sweep(spec_path, overrides)
    assert caught.value.exit_code == 3


def test_stage_names_are_unique_per_variant_and_safe_as_file_names(spec_path: Path) -> None:
    """Every variant's stages end with its tag; plots are planned once over every cell."""
    sweep = bayesflow.load(spec_path, ["model.hidden=[4],[8,8]", "seeds=[0]"], multirun=True)
    plan = bayesflow.plan(sweep)
    fits = [s.name for s in plan.of_kind("fit") if s.method == "sghmc"]
    assert sorted(fits) == sorted(
        f"fit/sghmc/T={t}/seed=0/model.hidden={h}" for t in ("0.1", "1") for h in ("4", "8-8")
    )
    assert all(re.fullmatch(r"[A-Za-z0-9._=/,-]+", name) for name in plan.stages)
    plots = plan.of_kind("plot")
    assert len(plots) == 2 and all(not p.variant for p in plots)
    cells = plots[0].config["cells"]
    assert {c["variant"] for c in cells} == {"model.hidden=[4]", "model.hidden=[8,8]"}
    assert {c["swept"]["model.hidden"] for c in cells} == {"[4]", "[8,8]"}


def test_long_tags_are_short_and_distinct() -> None:
    """A tag past the limit becomes v<index>-<hash>, still distinct per label."""
    long = [("methods.sghmc.lr", "0.0001"), ("model.hidden", "[512,512,512,512,512,512]"),
            ("prior.variance", "0.001")]
    tag = variant_tag(long, 3)
    assert re.fullmatch(r"v3-[0-9a-f]{8}", tag)
    assert variant_tag([*long[:2], ("prior.variance", "0.01")], 3) != tag


def test_a_plain_plan_keeps_its_names_and_keys(spec_path: Path) -> None:
    """Without -m nothing changes: no variant in any stage or cell."""
    plan = bayesflow.plan(bayesflow.load(spec_path))
    assert "fit/map/T=shared/seed=0" in plan.stages
    assert all(not stage.variant and not stage.swept for stage in plan.stages.values())
    assert all("variant" not in cell for cell in plan.stages["report"].config["cells"])


class Recorder:
    """A run_stage that records the stages it computes."""

    def __init__(self) -> None:
        self.calls: list[Stage] = []

    def __call__(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        self.calls.append(stage)
        (staging / "out.txt").write_text(stage.name)
        return {}


def test_sweeping_a_sampler_step_size_computes_map_once(spec_path: Path, tmp_path: Path) -> None:
    """Only methods.sghmc.lr varies: MAP, its curvature, Laplace and their evaluations have
    equal keys in both variants and run once; each variant still has its own stages."""
    sweep = bayesflow.load(spec_path, ["methods.sghmc.lr=0.01,0.02", *NO_REPORT], multirun=True)
    plan = bayesflow.plan(sweep)
    maps = [s for s in plan.of_kind("fit") if s.method == "map"]
    assert len(maps) == 2 and len({s.key for s in maps}) == 1
    recorder = Recorder()
    outcome = execute(plan, recorder, Cache(tmp_path / "cache"))
    computed = [stage.name for stage in recorder.calls]
    assert sum(name.startswith("fit/map/") for name in computed) == 1
    assert sum(name.startswith("fit/sghmc/") for name in computed) == 4  # 2 T × 2 lr
    assert sum(name.startswith("fit/laplace/") for name in computed) == 2  # 2 T, shared
    assert outcome.ok and len(outcome.entries) == len(plan.stages)
    # Rerun: nothing computed; one more value: only the new variant's sampler fits.
    again = Recorder()
    execute(bayesflow.plan(sweep), again, Cache(tmp_path / "cache"))
    assert again.calls == []
    wider = bayesflow.load(spec_path, ["methods.sghmc.lr=0.01,0.02,0.05", *NO_REPORT], multirun=True)
    more = Recorder()
    execute(bayesflow.plan(wider), more, Cache(tmp_path / "cache"))
    assert sorted(s.name for s in more.calls if s.kind == "fit") == [
        "fit/sghmc/T=0.1/seed=0/methods.sghmc.lr=0.05", "fit/sghmc/T=1/seed=0/methods.sghmc.lr=0.05",
    ]


def test_data_are_loaded_once_per_distinct_data_block(spec_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four variants over two data blocks load the data twice."""
    import bayesflow.variants

    loads: list[dict[str, Any]] = []
    real = bayesflow.variants.load_dataset

    def counting(config: dict[str, Any], base_dir: Path | None = None, model: Any = None) -> Any:
        loads.append(config)
        return real(config, base_dir, model)

    monkeypatch.setattr(bayesflow.variants, "load_dataset", counting)
    sweep = bayesflow.load(
        spec_path, ["data.split_seed=0,1", "prior.variance=0.5,1", *NO_REPORT], multirun=True
    )
    prepared = bayesflow.prepare(sweep)
    assert sorted(config["split_seed"] for config in loads) == [0, 1]
    digests = {label: data.digest for label, data in prepared.datasets.items()}
    assert len(set(digests.values())) == 2
    fits = {s.variant: s.key for s in prepared.plan.of_kind("fit") if s.method == "map"}
    assert len(set(fits.values())) == 4  # each variant's prior or data differs


def test_results_carry_the_variant_and_swept_values_as_strings() -> None:
    """A sweep's cells give `variant` and `swept/<key>` string columns, never coerced."""
    cells = [
        {"cell": f"fit/m/T=1/seed=0/{tag}", "evaluation": f"evaluate/m/T=1/seed=0/{tag}", "method": "m",
         "engine": "map", "temperature": 1.0, "seed": 0, "variant": f"model.hidden={raw}",
         "swept": {"model.hidden": raw}}
        for tag, raw in (("a", "[4]"), ("b", "1e-3"))
    ]
    frame = results_table(cells, {}, {})
    assert list(frame["variant"]) == ["model.hidden=[4]", "model.hidden=1e-3"]
    assert list(frame["swept/model.hidden"]) == ["[4]", "1e-3"]
    assert not pandas.api.types.is_numeric_dtype(frame["swept/model.hidden"])
    plain = results_table([{k: v for k, v in cells[0].items() if k not in ("variant", "swept")}], {}, {})
    assert "variant" not in plain


def test_the_swept_keys_are_fit_params_from_the_variant_spec(spec_path: Path) -> None:
    """A child's params come from its variant's spec: prior.variance and the full name of a
    swept method key; its tags name the variant."""
    from bayesflow.tracking import InMemoryTracker

    sweep = bayesflow.load(
        spec_path, ["prior.variance=0.5,2", "methods.sghmc.lr=0.01,0.02", "seeds=[0]",
                    "temperatures=[1]", "methods.sghmc.epochs=1", "methods.map.epochs=1", *NO_REPORT],
        multirun=True,
    )
    tracker = InMemoryTracker()
    result = bayesflow.run(sweep, tracker=tracker)
    assert result.exit_code == 0
    frame = bayesflow.results(result.run_id, tracker=tracker)
    assert len(frame) == 4 * 3  # 4 variants × (map, laplace, sghmc)
    sghmc = frame[frame["method"] == "sghmc"]
    for row in sghmc.itertuples():
        record = tracker.get_run(row.run_id)
        assert record.tags["bayesflow.variant"] == row.variant
        swept = dict(pair.split("=") for pair in row.variant.split())
        assert float(record.params["prior.variance"]) == float(swept["prior.variance"])
        assert float(record.params["methods.sghmc.lr"]) == float(record.params["lr"])
    assert set(frame.columns) >= {"variant", "swept/prior.variance", "swept/methods.sghmc.lr"}
    assert sorted(set(frame["swept/prior.variance"])) == ["0.5", "2"]
    parent = tracker.get_run(result.run_id)
    assert parent.params["variants"] in ("4", 4)
