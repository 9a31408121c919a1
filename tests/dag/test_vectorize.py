"""Planning vectorised grids: one group stage per SG-MCMC method, cell stages that read it."""

from __future__ import annotations

from pathlib import Path

from bayesflow.dag.plan import plan_workflow
from bayesflow.spec import load_spec

GRID = ["temperatures=[0.01,0.1,1]", "seeds=[0,1]"]
SGLD = ["+methods.sgld={engine: sgld, lr: 0.001, epochs: 2}"]


def test_one_group_per_sampler_and_cells_that_read_it(tiny_spec: Path) -> None:
    """Each SG-MCMC method is one fit_group stage whose cells are its grid's fit stages."""
    spec = load_spec(tiny_spec, [*GRID, *SGLD, "execution.vectorize=true"]).spec
    plan = plan_workflow(spec, "digest")
    groups = plan.of_kind("fit_group")
    assert sorted(stage.name for stage in groups) == ["fit_group/sghmc", "fit_group/sgld"]
    for group in groups:
        cells = [s for s in plan.of_kind("fit") if s.method == group.method]
        assert len(cells) == 6 and all(s.inputs == (group.name,) for s in cells)
        assert [c["name"] for c in group.config["cells"]] == [
            f"fit/{group.method}/T={t}/seed={s}" for t in ("0.01", "0.1", "1") for s in (0, 1)
        ]
        assert group.cacheable and all(s.config["vectorized"] for s in cells)
    # Other methods are planned as before; every cell keeps its evaluation.
    assert {s.inputs for s in plan.of_kind("fit") if s.method == "laplace"} == {
        ("curvature/laplace/seed=0",),
        ("curvature/laplace/seed=1",),
    }
    assert plan.counts() == {
        "fit_group": 2,
        "curvature": 2,
        "fit": 2 + 6 + 6 + 6,
        "evaluate": 20,
        "plot": 2,
        "report": 1,
    }


def test_group_key_covers_every_cell(tiny_spec: Path) -> None:
    """Another temperature or a changed hyper-parameter changes the group and every cell."""
    vectorize = [*GRID, "execution.vectorize=true"]
    first = plan_workflow(load_spec(tiny_spec, vectorize).spec, "d")
    hotter = plan_workflow(
        load_spec(tiny_spec, [*vectorize, "temperatures=[0.01,0.1,2]"]).spec, "d"
    )
    assert first.stages["fit_group/sghmc"].key != hotter.stages["fit_group/sghmc"].key
    assert (
        first.stages["fit/sghmc/T=0.01/seed=0"].key != hotter.stages["fit/sghmc/T=0.01/seed=0"].key
    )
    assert (
        first.stages["fit/map/T=shared/seed=0"].key == hotter.stages["fit/map/T=shared/seed=0"].key
    )


def test_plan_without_vectorize_is_unchanged(tiny_spec: Path) -> None:
    """``vectorize: false`` (the default) plans exactly the stages and keys of before."""
    default = plan_workflow(load_spec(tiny_spec, GRID).spec, "d")
    explicit = plan_workflow(load_spec(tiny_spec, [*GRID, "execution.vectorize=false"]).spec, "d")
    assert {n: s.key for n, s in default.stages.items()} == {
        n: s.key for n, s in explicit.stages.items()
    }
    assert "fit_group" not in default.counts()
    assert all(not s.inputs for s in default.of_kind("fit") if s.method == "sghmc")


def test_methods_with_a_source_are_not_grouped(tiny_spec: Path) -> None:
    """A sampler that starts ``from`` another fit is fitted one by one."""
    overrides = [*GRID, "execution.vectorize=true", "methods.sghmc.from=map"]
    plan = plan_workflow(load_spec(tiny_spec, overrides).spec, "d")
    assert "fit_group" not in plan.counts()
    assert plan.stages["fit/sghmc/T=0.1/seed=1"].inputs == ("fit/map/T=shared/seed=1",)
