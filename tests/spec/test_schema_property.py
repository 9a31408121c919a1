"""Property: every spec the JSON Schema admits either validates and plans, or is refused
with located problems; nothing else is ever raised."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from bayesflow.dag.plan import plan_workflow
from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from bayesflow.spec.models import WorkflowSpec
from tests.spec.schema_strategy import from_schema

SCHEMA = WorkflowSpec.model_json_schema(by_alias=True)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(instance=from_schema(SCHEMA))
def test_schema_instances_validate_and_plan_or_raise_a_spec_error(instance: dict[str, Any]) -> None:
    """A schema-valid mapping loads and plans, or raises SpecError naming each key path."""
    try:
        loaded = load_spec(instance)
    except SpecError as error:
        assert error.problems
        assert all(": " in problem for problem in error.problems), error.problems
        return
    plan = plan_workflow(loaded.spec, "0" * 16)
    fits = [stage for stage in plan.stages.values() if stage.kind in ("fit", "fit_group")]
    assert fits, "a valid spec plans at least one fit"


@pytest.mark.slow
def test_the_strategy_reaches_valid_specs() -> None:
    """The strategy is not vacuous: among its draws some specs validate."""
    found: list[bool] = []

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(instance=from_schema(SCHEMA))
    def draw(instance: dict[str, Any]) -> None:
        try:
            load_spec(instance)
            found.append(True)
        except SpecError:
            found.append(False)

    draw()
    assert any(found)
