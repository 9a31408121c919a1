"""Specs that would validate and then fail at run time are refused at validate."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, write


def problems(path: Path, *overrides: str) -> list[str]:
    """The problems of a spec file with overrides (empty when it loads)."""
    try:
        load_spec(path, list(overrides))
    except SpecError as error:
        return error.problems
    return []


def test_a_text_model_on_numeric_data_is_refused(tmp_path: Path) -> None:
    """cnn_lstm reads token ids; on digits features the spec says which models fit."""
    path = write(tmp_path, TINY_SPEC)
    assert problems(path, "model={name: cnn_lstm}") == [
        "override 'model={name: cnn_lstm}': model.name: cnn_lstm reads tokens inputs, but data "
        "'sklearn_digits' gives features; use a model that reads features (cnn, linear, "
        "logistic, mlp, python) or other data"
    ]


def test_a_network_on_no_data_is_refused(tmp_path: Path) -> None:
    """An MLP needs features; `data: none` gives none (only energy models read nothing)."""
    path = write(tmp_path, TINY_SPEC.replace("  name: sklearn_digits\n  test_fraction: 0.5\n", "  name: none\n"))
    found = problems(path)
    assert len(found) == 1
    assert "model.name: mlp reads features or tokens inputs, but data 'none' gives none" in found[0]


@pytest.mark.parametrize("name", ["..", ".hidden", "-rf", "a/b", "a" * 101, ""])
def test_unsafe_workflow_names_are_refused(tmp_path: Path, name: str) -> None:
    """The name becomes folder names: no separators, no leading dot or dash, ≤ 100 characters."""
    path = write(tmp_path, TINY_SPEC)
    found = problems(path, f"name='{name}'")
    assert len(found) == 1 and "name:" in found[0]


def test_a_long_safe_name_is_accepted(tmp_path: Path) -> None:
    """100 characters of letters are a valid name."""
    assert problems(write(tmp_path, TINY_SPEC), f"name={'a' * 100}") == []


def test_a_method_outside_its_tasks_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A method whose traits leave out the likelihood's task is refused, naming the tasks."""
    from dataclasses import replace

    from bayesflow.methods import METHODS

    sghmc = METHODS.get("sghmc")
    narrowed = replace(sghmc, traits=replace(sghmc.traits, tasks=frozenset({"regression"})))
    monkeypatch.setitem(METHODS._load(), "sghmc", narrowed)
    found = problems(write(tmp_path, TINY_SPEC))
    assert found == [
        f"{tmp_path / 'spec.yaml'}:25:5: methods.sghmc.engine: sghmc does not apply to "
        "classification (the likelihood's task); it applies to regression"
    ]


def test_a_reference_of_the_wrong_type_is_a_located_error(tmp_path: Path) -> None:
    """`evaluate.reference: [a list]` is reported by its field, not a TypeError."""
    found = problems(write(tmp_path, TINY_SPEC), "+evaluate.reference=[map]")
    assert len(found) == 1 and "evaluate.reference" in found[0]
