"""Planning `evaluate.reference`: each evaluation reads the reference fit and evaluation of
its cell (or of the stated temperature), or the reference file's digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.dag.plan import plan_workflow
from bayesflow.spec import load_spec

REFERENCE = ["+evaluate.reference=sghmc", "seeds=[0,1]"]


def test_evaluations_read_the_reference_fit_of_their_cell(tiny_spec: Path) -> None:
    """Laplace at T and seed s waits for the SGHMC fit and evaluation at T and s; its key
    changes with them."""
    plan = plan_workflow(load_spec(tiny_spec, REFERENCE).spec, "d")
    stage = plan.stages["evaluate/laplace/T=0.1/seed=1"]
    assert stage.inputs == (
        "fit/laplace/T=0.1/seed=1", "fit/sghmc/T=0.1/seed=1", "evaluate/sghmc/T=0.1/seed=1"
    )
    assert stage.config["reference"] == plan.stages["fit/sghmc/T=0.1/seed=1"].key
    assert stage.config["reference_evaluation"] == plan.stages["evaluate/sghmc/T=0.1/seed=1"].key
    changed = plan_workflow(load_spec(tiny_spec, [*REFERENCE, "methods.sghmc.lr=0.02"]).spec, "d")
    assert changed.stages[stage.name].key != stage.key


def test_reference_and_temperature_free_fits_have_no_reference(tiny_spec: Path) -> None:
    """The reference's own evaluation and the T → 0 MAP read their fit only."""
    plan = plan_workflow(load_spec(tiny_spec, REFERENCE).spec, "d")
    assert plan.stages["evaluate/sghmc/T=1/seed=0"].inputs == ("fit/sghmc/T=1/seed=0",)
    assert plan.stages["evaluate/map/T=shared/seed=0"].inputs == ("fit/map/T=shared/seed=0",)


def test_unset_evaluations_leave_keys_unchanged(tiny_spec: Path) -> None:
    """Writing the defaults `ksd: null, reference: null` plans the same keys as omitting them."""
    plain = plan_workflow(load_spec(tiny_spec).spec, "d")
    explicit = plan_workflow(
        load_spec(tiny_spec, ["+evaluate.ksd=null", "+evaluate.reference=null"]).spec, "d"
    )
    assert {n: s.key for n, s in plain.stages.items()} == {n: s.key for n, s in explicit.stages.items()}


def test_a_stated_temperature_compares_every_cell_with_that_one(tiny_spec: Path) -> None:
    """`{method: sghmc, temperature: 1}`: Laplace at 0.1, the T → 0 MAP and SGHMC's own
    T = 0.1 cell read SGHMC at T = 1, which reads its fit only; the plan's cells keep the
    grid's order."""
    overrides = ["+evaluate.reference={method: sghmc, temperature: 1}", "seeds=[0,1]"]
    plan = plan_workflow(load_spec(tiny_spec, overrides).spec, "d")
    for cell in ("laplace/T=0.1", "map/T=shared", "sghmc/T=0.1"):
        stage = plan.stages[f"evaluate/{cell}/seed=1"]
        assert stage.inputs[1:] == ("fit/sghmc/T=1/seed=1", "evaluate/sghmc/T=1/seed=1"), cell
    assert plan.stages["evaluate/sghmc/T=1/seed=0"].inputs == ("fit/sghmc/T=1/seed=0",)
    plain = plan_workflow(load_spec(tiny_spec, ["seeds=[0,1]"]).spec, "d")
    assert [n for n in plan.stages if n.startswith("evaluate/")] == [
        n for n in plain.stages if n.startswith("evaluate/")
    ]


def test_a_reference_file_puts_its_digest_in_every_evaluation_key(tiny_spec: Path) -> None:
    """Other probabilities change every evaluation's key and no fit's; a plan without the
    digest is refused."""
    spec = load_spec(tiny_spec, ["+evaluate.reference={file: probs.csv}"]).spec
    first, second = plan_workflow(spec, "d", reference_digest="a"), plan_workflow(spec, "d", reference_digest="b")
    for name, stage in first.stages.items():
        changed = second.stages[name].key != stage.key
        assert changed == (stage.kind in ("evaluate", "plot", "report")), name
        if stage.kind == "evaluate":
            assert stage.inputs == (name.replace("evaluate/", "fit/", 1),)
    with pytest.raises(ValueError, match="reference_digest"):
        plan_workflow(spec, "d")
