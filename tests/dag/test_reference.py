"""Planning `evaluate.reference`: each evaluation reads the reference fit of its cell."""

from __future__ import annotations

from pathlib import Path

from bayesflow.dag.plan import plan_workflow
from bayesflow.spec import load_spec

REFERENCE = ["+evaluate.reference=sghmc", "seeds=[0,1]"]


def test_evaluations_read_the_reference_fit_of_their_cell(tiny_spec: Path) -> None:
    """Laplace at T and seed s waits for the SGHMC fit at T and s; its key changes with it."""
    plan = plan_workflow(load_spec(tiny_spec, REFERENCE).spec, "d")
    stage = plan.stages["evaluate/laplace/T=0.1/seed=1"]
    assert stage.inputs == ("fit/laplace/T=0.1/seed=1", "fit/sghmc/T=0.1/seed=1")
    assert stage.config["reference"] == plan.stages["fit/sghmc/T=0.1/seed=1"].key
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
