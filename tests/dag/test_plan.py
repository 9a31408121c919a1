"""Planning: stage counts, shared MAP fits, stable keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.dag.plan import plan_workflow
from bayesflow.spec import load_spec


def test_map_is_planned_once_per_seed(tiny_spec: Path) -> None:
    """A k-temperature grid costs one MAP fit and one curvature pass per seed, shared by
    every Laplace temperature."""
    spec = load_spec(tiny_spec, ["temperatures=[0.01,0.1,1]", "seeds=[0,1]"]).spec
    plan = plan_workflow(spec, "digest")
    fits = plan.of_kind("fit")
    assert sorted(s.name for s in fits if s.method == "map") == [
        "fit/map/T=shared/seed=0", "fit/map/T=shared/seed=1"
    ]
    laplace = [s for s in fits if s.method == "laplace"]
    assert len(laplace) == 6
    assert {s.inputs for s in laplace if s.seed == 0} == {("curvature/laplace/seed=0",)}
    assert plan.stages["curvature/laplace/seed=0"].inputs == ("fit/map/T=shared/seed=0",)
    assert plan.counts() == {
        "fit": 2 + 6 + 6, "curvature": 2, "evaluate": 14, "plot": 2, "report": 1
    }


def test_likelihood_convention_fits_map_per_temperature(tiny_spec: Path) -> None:
    """When only the likelihood is tempered the mode moves with T, so MAP is not shared."""
    spec = load_spec(tiny_spec, ["temperature_convention=likelihood"]).spec
    fits = plan_workflow(spec, "digest").of_kind("fit")
    assert sorted(s.name for s in fits if s.method == "map") == [
        "fit/map/T=0.1/seed=0", "fit/map/T=1/seed=0"
    ]


def test_keys_are_stable_and_content_addressed(tiny_spec: Path) -> None:
    """Equal specs plan equal keys; a changed hyper-parameter changes only its stages."""
    spec = load_spec(tiny_spec).spec
    first, again = plan_workflow(spec, "d"), plan_workflow(spec, "d")
    assert {n: s.key for n, s in first.stages.items()} == {n: s.key for n, s in again.stages.items()}
    changed = plan_workflow(load_spec(tiny_spec, ["methods.sghmc.lr=0.02"]).spec, "d")
    differing = {n for n in first.stages if first.stages[n].key != changed.stages[n].key}
    assert differing and all("sghmc" in n or n.startswith(("plot", "report")) for n in differing)
    assert first.stages["fit/map/T=shared/seed=0"].key == changed.stages["fit/map/T=shared/seed=0"].key


def test_data_digest_enters_every_fit_key(tiny_spec: Path) -> None:
    """Different data give different fit keys."""
    spec = load_spec(tiny_spec).spec
    first, second = plan_workflow(spec, "a"), plan_workflow(spec, "b")
    assert all(first.stages[s.name].key != second.stages[s.name].key for s in first.of_kind("fit"))


@pytest.mark.slow
def test_order_puts_inputs_first(tiny_spec: Path) -> None:
    """The execution order respects every stage's inputs."""
    order = [s.name for s in plan_workflow(load_spec(tiny_spec).spec, "d").order()]
    for position, name in enumerate(order):
        stage = plan_workflow(load_spec(tiny_spec).spec, "d").stages[name]
        assert all(order.index(dep) < position for dep in stage.inputs)


@pytest.mark.slow
def test_deep_ensemble_is_shared_across_temperatures(tiny_spec: Path) -> None:
    """A deep ensemble (T = 0 limit of parallel SGHMC) is fitted once per seed."""
    spec = load_spec(tiny_spec, ["+methods.ensemble={engine: deep_ensemble, members: 3}"]).spec
    fits = plan_workflow(spec, "d").of_kind("fit")
    assert [s.name for s in fits if s.method == "ensemble"] == ["fit/ensemble/T=shared/seed=0"]


def test_sampled_and_linearized_laplace_share_one_curvature_key(tiny_spec: Path) -> None:
    """Two Laplace methods differing only in prediction plan the same curvature key."""
    extra = "+methods.laplace_linear={engine: laplace_diag_ggn, from: map, prediction: linearized}"
    plan = plan_workflow(load_spec(tiny_spec, [extra]).spec, "d")
    sampled = plan.stages["curvature/laplace/seed=0"]
    linear = plan.stages["curvature/laplace_linear/seed=0"]
    assert sampled.key == linear.key
    assert plan.stages["fit/laplace/T=1/seed=0"].key != plan.stages["fit/laplace_linear/T=1/seed=0"].key
