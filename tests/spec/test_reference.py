"""The spec documents itself: every field described, docs/spec.md generated from the models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesflow.methods import METHODS
from bayesflow.spec import WorkflowSpec
from bayesflow.spec.catalog import KINDS, entries, render_type
from bayesflow.spec.settings import ExecutionSpec
from bayesflow.spec.reference import markdown_reference

DOCS = Path(__file__).parents[2] / "docs" / "spec.md"


def undescribed(node: Any, where: str = "#") -> list[str]:
    """Every property of a JSON Schema (at any depth) that has no description."""
    missing: list[str] = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if not isinstance(prop, dict) or not str(prop.get("description", "")).strip():
                missing.append(f"{where}/properties/{name}")
        for key, value in node.items():
            missing += undescribed(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            missing += undescribed(value, f"{where}/{index}")
    return missing


def test_every_schema_property_has_a_description() -> None:
    """Editors show each field's description, so none may be missing."""
    assert undescribed(WorkflowSpec.model_json_schema(by_alias=True)) == []


def test_every_spec_model_has_a_docstring() -> None:
    """Each dataset, model, likelihood, prior and engine says what it is."""
    assert [entry.names for kind in KINDS for entry in entries(kind) if not entry.summary] == []


def test_engine_listing_covers_every_engine() -> None:
    """`bayesflow engines` lists exactly the engines a spec accepts."""
    listed = [name for entry in entries("engines") for name in entry.names]
    assert sorted(listed) == METHODS.names()


def test_docs_spec_md_is_generated_from_the_models() -> None:
    """docs/spec.md equals the generator's output; regenerate it when the models change."""
    expected = markdown_reference()
    assert DOCS.read_text() == expected, (
        "docs/spec.md is out of date: run `bayesflow schema --markdown -o docs/spec.md`"
    )


def test_reference_lists_every_key_of_every_entry() -> None:
    """Each entry's keys appear in the reference with their defaults."""
    text = markdown_reference()
    for kind in KINDS:
        for entry in entries(kind):
            for parameter in entry.parameters:
                assert f"| `{parameter.key}` | " in text, (kind, entry.names, parameter.key)


def test_types_read_as_words() -> None:
    """Field types are rendered the way a spec author reads them."""
    fields = WorkflowSpec.model_fields
    assert render_type(fields["temperatures"].annotation, fields["temperatures"].metadata) == (
        "list (at least 1 item) of number ≥ 0"
    )
    threads = ExecutionSpec.model_fields["threads"]
    assert render_type(threads.annotation, threads.metadata) == "integer > 0 or null"
