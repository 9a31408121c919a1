"""Every leaf remembers where it came from: a file line, a base spec's line, or an override."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from bayesflow.spec.locations import Location
from tests.conftest import TINY_SPEC, write


def problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    """The problems load_spec reports for ``path``."""
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return info.value.problems


def family(tmp_path: Path, base_edit: tuple[str, str] = ("", ""), child: str = "") -> tuple[Path, Path]:
    """A base spec (optionally edited) and a child that extends it."""
    base = write(tmp_path, TINY_SPEC.replace(*base_edit) if base_edit[0] else TINY_SPEC, "base.yaml")
    return base, write(tmp_path, "extends: base.yaml\nname: child\n" + child, "child.yaml")


def test_inherited_value_points_at_the_base_file(tmp_path: Path) -> None:
    """An error in a value the child inherits is located in the base spec."""
    base, child = family(tmp_path, ("lr: 0.01}", "lr: -1}"))
    assert problems(child) == [
        f"{base.resolve()}:19:29: methods.map.optimizer.lr: expected a value greater than 0, got -1"
    ]


def test_child_value_points_at_the_child_file(tmp_path: Path) -> None:
    """An error in a value the child sets is located in the child, next to base errors."""
    base, child = family(tmp_path, ("lr: 0.01}", "lr: -1}"), "seeds: [1, 1]\n")
    assert problems(child) == [
        f"{child}:3:1: seeds: expected unique seeds, got 1 more than once; remove the repeats",
        f"{base.resolve()}:19:29: methods.map.optimizer.lr: expected a value greater than 0, got -1",
    ]


def test_child_list_replaces_the_base_list_and_its_locations(tmp_path: Path) -> None:
    """A list in the child replaces the base's; its items are located in the child."""
    _, child = family(tmp_path, child="temperatures: [1.0, -2.0]\n")
    assert problems(child) == [
        f"{child}:3:21: temperatures.1: expected a value greater than or equal to 0, got -2.0"
    ]


def test_overridden_value_names_the_override(tmp_path: Path) -> None:
    """An error in an overridden value says which override set it."""
    _, child = family(tmp_path)
    assert problems(child, ["methods.map.epochs=0"]) == [
        "override 'methods.map.epochs=0': methods.map.epochs: expected a value greater than 0, got 0"
    ]


def test_overridden_subtree_names_the_override(tmp_path: Path) -> None:
    """Every leaf of a mapping set by an override is located at that override."""
    spec = write(tmp_path, TINY_SPEC)
    assert problems(spec, ["model={name: mlp, hidden: [4, 0]}"]) == [
        ("override 'model={name: mlp, hidden: [4, 0]}': model.hidden.1: expected a value "
        "greater than 0, got 0")
    ]


def test_origin_of_each_leaf(tmp_path: Path) -> None:
    """LoadedSpec.origin says where a key came from: child, base, or override."""
    base, child = family(tmp_path, child="seeds: [1, 2]\n")
    loaded = load_spec(child, ["methods.sghmc.lr=0.02"])
    assert loaded.origin("seeds") == Location(str(child), 3, 1)
    assert loaded.origin("methods.map.epochs") == Location(str(base.resolve()), 20, 5)
    assert loaded.origin("methods.sghmc.lr") == Location("override 'methods.sghmc.lr=0.02'")
    assert loaded.origin("evaluate.ece_bins") == Location(str(base.resolve()), 30, 1)


def test_overriding_a_list_item(tiny_spec: Path) -> None:
    """An override may address a list item by its index."""
    assert load_spec(tiny_spec, ["model.hidden.0=5"]).spec.model.hidden == [5]


def test_override_with_invalid_yaml_value(tiny_spec: Path) -> None:
    """An override whose value does not parse says why, on one line."""
    assert problems(tiny_spec, ["temperatures=[0.1"]) == [
        ("override 'temperatures=[0.1': the value is not valid YAML: unclosed `[` opened at "
        "line 1, column 1: expected `,` or `]`, got the end of the file; close the bracket")
    ]


def test_override_without_equals(tiny_spec: Path) -> None:
    """An override must be `key=value`."""
    assert problems(tiny_spec, ["seeds"]) == [
        "override 'seeds': expected `key.path=value` (or `+key.path=value` to add a key)"
    ]


def test_extends_a_missing_base(tmp_path: Path) -> None:
    """A base spec that does not exist is located at the `extends` key."""
    child = write(tmp_path, "extends: nope.yaml\nname: child\n", "child.yaml")
    assert problems(child) == [
        (f"{child}:1:1: extends: base spec {str(tmp_path.resolve() / 'nope.yaml')!r} not found; "
        "check the path")
    ]


def test_extends_cycle(tmp_path: Path) -> None:
    """Specs that extend each other are a located error naming the chain."""
    first = write(tmp_path, "extends: second.yaml\nname: a\n", "first.yaml")
    second = write(tmp_path, "extends: first.yaml\nname: b\n", "second.yaml")
    chain = f"{first.resolve()} -> {second.resolve()} -> {first.resolve()}"
    assert problems(first) == [
        f"{second}:1:1: extends: first.yaml forms a cycle ({chain}); remove one `extends`"
    ]
