"""Listings show a method's own default for a nested setting it redeclares."""

from __future__ import annotations

from pydantic import Field

from bayesflow.methods.base import SamplerScheduleSpec, Strict
from bayesflow.spec.catalog import parameters


class _Cyclical(Strict):
    """A settings model whose nested schedule defaults to a cyclical one."""

    schedule: SamplerScheduleSpec = Field(
        default_factory=lambda: SamplerScheduleSpec(kind="cyclical", cycles=3),
        description="Step-size schedule.",
    )


def test_a_redeclared_nested_default_is_listed() -> None:
    """`schedule.kind` lists `cyclical` and `schedule.cycles` 3, not the class defaults."""
    listed = {parameter.key: parameter.default for parameter in parameters(_Cyclical)}
    assert listed["schedule.kind"] == "cyclical"
    assert listed["schedule.cycles"] == "3"
    assert listed["schedule.power"] == "0.55"
