"""Property: whatever is done to a valid spec, loading it passes or raises SpecError."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayesflow.errors import SpecError
from bayesflow.methods import METHODS
from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, on_byte_checkpoint

WORKFLOWS = Path(__file__).parents[2] / "workflows"
BASES = [yaml.safe_load(TINY_SPEC)] + [
    on_byte_checkpoint(yaml.safe_load(path.read_text())) for path in sorted(WORKFLOWS.glob("*.yaml"))
]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["${name}", "${data.nope}", "${", "$", "${oc.env:NOPE}", "map", "csv", "-1", "1e-3"]),
)
junk = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-3, 3)), children, max_size=3),
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a nested mapping/list, parents before children."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        found.append((*prefix, key))
        found += paths(value, (*prefix, key))
    return found


def parent_of(spec: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = spec
    for part in path[:-1]:
        node = node[part]
    return node


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one to three drops, renames, retypes, injections or swaps."""
    spec = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        every = paths(spec)
        if not every:
            break
        path = draw(st.sampled_from(every))
        parent, key = parent_of(spec, path), path[-1]
        action = draw(st.sampled_from(["drop", "rename", "retype", "inject", "swap"]))
        if action == "drop":
            del parent[key]
        elif action == "rename" and isinstance(parent, dict):
            new_key = draw(st.one_of(st.text(max_size=8), st.just(f"{key}s"), st.integers(0, 3)))
            parent[new_key] = parent.pop(key)
        elif action == "retype":
            parent[key] = draw(junk)
        elif action == "inject" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(junk)
        elif action == "swap" and isinstance(spec.get("methods"), dict) and spec["methods"]:
            method = draw(st.sampled_from(sorted(map(str, spec["methods"]))))
            if isinstance(spec["methods"].get(method), dict):
                names = [*METHODS.names(), "mlp", "csv", "gaussian", "none"]
                spec["methods"][method]["engine"] = draw(st.sampled_from(names))
    return spec


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=mutated_specs(), through_yaml=st.booleans())
def test_mutated_specs_load_or_raise_spec_error(spec: dict[str, Any], through_yaml: bool) -> None:
    """Dropped, renamed, retyped and injected keys never raise anything but SpecError."""
    try:
        if through_yaml:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "spec.yaml"
                path.write_text(yaml.safe_dump(spec, allow_unicode=True))
                load_spec(path)
        else:
            load_spec(spec)
    except SpecError as error:
        assert error.problems and all(isinstance(p, str) and p for p in error.problems)
