"""Spec loading: YAML in a temporary folder, whole error messages matched."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bayesflow.errors import SpecError
from bayesflow.methods import METHODS
from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, byte_checkpoint_overrides, write


def problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    """The problems load_spec reports for ``path``."""
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return info.value.problems


def test_tiny_spec_loads(tiny_spec: Path) -> None:
    """A valid spec loads with defaults filled in."""
    loaded = load_spec(tiny_spec)
    assert loaded.spec.methods["laplace"].from_ == "map"
    assert loaded.spec.evaluate.ece_bins == 10
    assert loaded.spec.tracking.uri is None  # MLFLOW_TRACKING_URI, else sqlite:///mlflow.db


def test_every_workflow_validates() -> None:
    """Every bundled workflow (workflows/) is valid."""
    specs = sorted(Path(__file__).parents[2].joinpath("workflows").glob("*.yaml"))
    assert specs
    for path in specs:  # the language models on the shipped checkpoint (tests/conftest.py)
        load_spec(path, byte_checkpoint_overrides(path.stem))


def test_misspelt_top_level_key_is_located(tmp_path: Path) -> None:
    """An unknown key names file, line, column and the closest valid key."""
    path = write(tmp_path, TINY_SPEC.replace("seeds:", "seedz:"))
    (message,) = [p for p in problems(path) if "seedz" in p]
    assert message == (
        f"{path}:15:1: seedz: unknown key `seedz`; did you mean `seeds`? (allowed: name, "
        "description, data, model, likelihood, prior, temperature_convention, temperatures, "
        "seeds, methods, evaluate, plots, report, tracking, execution)"
    )


def test_nested_wrong_value_names_the_key_path(tmp_path: Path) -> None:
    """A value out of range deep inside a method is reported with its key path."""
    path = write(tmp_path, TINY_SPEC.replace("lr: 0.01}", "lr: -1}"))
    assert problems(path) == [
        f"{path}:19:29: methods.map.optimizer.lr: expected a value greater than 0, got -1"
    ]


def test_unknown_engine_suggests_the_closest(tmp_path: Path) -> None:
    """A misspelt engine name gets a suggestion and the list of engines."""
    path = write(tmp_path, TINY_SPEC.replace("engine: sghmc", "engine: sghcm"))
    (problem,) = problems(path)
    prefix = f"{path}:25:5: methods.sghmc.engine: unknown engine 'sghcm'; did you mean 'sghmc'? (expected one of: "
    assert problem.startswith(prefix) and problem.endswith(")")
    assert sorted(problem[len(prefix):-1].split(", ")) == sorted(METHODS.names())  # the schema's order


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    """Several independent mistakes are all reported."""
    text = TINY_SPEC.replace("variance: 1.0", "variance: -2").replace("seeds: [0]", "seeds: [0, 0]")
    found = problems(write(tmp_path, text))
    assert len(found) == 2
    assert found[0].startswith(f"{tmp_path / 'spec.yaml'}:13:3: prior.variance: ")
    assert found[1] == (
        f"{tmp_path / 'spec.yaml'}:15:1: seeds: expected unique seeds, got 0 more than once; "
        "remove the repeats"
    )


def test_laplace_needs_a_source(tmp_path: Path) -> None:
    """A Laplace method without `from` says what to add."""
    path = write(tmp_path, TINY_SPEC.replace("    from: map\n", ""))
    assert problems(path) == [
        (f"{path}:21:3: methods.laplace: a laplace_diag_ggn method needs "
        "`from: <a map or mle method>`; add it")
    ]


def test_from_cycle_is_reported(tmp_path: Path) -> None:
    """`from` chains that loop are an error naming the loop."""
    text = TINY_SPEC.replace("    engine: map\n", "    engine: map\n    from: laplace\n")
    found = problems(write(tmp_path, text))
    assert found == [f"{tmp_path / 'spec.yaml'}:19:5: methods.map.from: `from` forms a cycle: map -> laplace -> map"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty"),
        ("- a\n- b\n", "the document is a list"),
        ("name: a\nname: b\n", "duplicate key 'name' (first defined at line 1)"),
        ("a: [1, 2\n", "YAML syntax error"),
        ("a: !!python/object/apply:os.system ['echo hi']\n", "is not allowed in a workflow spec"),
    ],
)
def test_broken_yaml_is_a_spec_error(tmp_path: Path, text: str, expected: str) -> None:
    """Unparseable, empty, non-mapping, duplicate-key and unsafe documents are refused."""
    (message,) = problems(write(tmp_path, text))
    assert expected in message


def test_billion_laughs_fails_fast(tmp_path: Path) -> None:
    """An alias bomb is refused before it is expanded."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        refs = ",".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    (message,) = problems(write(tmp_path, "\n".join(lines) + "\n"))
    assert "expands to more than" in message


def test_not_utf8(tmp_path: Path) -> None:
    """A file that is not UTF-8 says so with its line."""
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    assert problems(path) == [f"{path}:1: the file is not UTF-8 (byte 0xe9 at offset 9); save it as UTF-8"]


def test_missing_file(tmp_path: Path) -> None:
    """A path that does not exist is a spec error, not a traceback."""
    path = tmp_path / "nope.yaml"
    assert problems(path) == [f"{path}: file not found; check the path"]


def test_overrides_replace_values(tiny_spec: Path) -> None:
    """Hydra-style overrides parse their values as YAML."""
    loaded = load_spec(tiny_spec, ["temperatures=[0.01,0.1,1]", "methods.map.epochs=5", "seeds=[3]"])
    assert loaded.spec.temperatures == [0.01, 0.1, 1.0]
    assert loaded.spec.methods["map"].epochs == 5
    assert loaded.spec.seeds == [3]


def test_override_of_missing_key_suggests(tiny_spec: Path) -> None:
    """Overriding a key that does not exist is an error unless added with `+`."""
    assert problems(tiny_spec, ["methods.map.epoch=5"]) == [
        ("override 'methods.map.epoch=5': the spec has no key `methods.map.epoch`; did you mean "
        "`methods.map.epochs`? (to add a new key, write `+methods.map.epoch=5`)")
    ]
    loaded = load_spec(tiny_spec, ["+methods.map.batch_size=7"])
    assert loaded.spec.methods["map"].batch_size == 7


def test_interpolation_pointing_nowhere(tmp_path: Path) -> None:
    """A broken interpolation names the key that holds it and its line."""
    text = TINY_SPEC.replace("description: a tiny workflow for tests", "description: ${data.nope}")
    assert problems(write(tmp_path, text)) == [
        (f"{tmp_path / 'spec.yaml'}:2:1: description: the interpolation '${{data.nope}}' points "
        "nowhere: the spec has no key `data.nope`; did you mean `data.name`?")
    ]


def test_interpolation_works(tmp_path: Path) -> None:
    """Interpolations resolve before validation."""
    text = TINY_SPEC.replace("description: a tiny workflow for tests", "description: run ${name}")
    assert load_spec(write(tmp_path, text)).spec.description == "run tiny"


def test_extends_merges_a_base(tmp_path: Path) -> None:
    """A spec can extend a base spec and override part of it."""
    write(tmp_path, TINY_SPEC, "base.yaml")
    child = write(tmp_path, "extends: base.yaml\nname: child\nseeds: [1, 2]\n", "child.yaml")
    spec = load_spec(child).spec
    assert (spec.name, spec.seeds, spec.methods["map"].epochs) == ("child", [1, 2], 3)


def test_nuts_refuses_a_zero_temperature(tmp_path: Path) -> None:
    """NUTS needs T > 0: a grid holding 0 is refused at the engine's line."""
    text = TINY_SPEC.replace("temperatures: [0.1, 1.0]", "temperatures: [0, 1.0]").replace(
        "  laplace:\n", "  reference:\n    engine: nuts\n  laplace:\n"
    )
    path = write(tmp_path, text)
    assert problems(path) == [
        f"{path}:22:5: methods.reference.engine: nuts samples exp(-U/T) and needs T > 0, but "
        "`temperatures` holds 0; drop 0 from the grid or use an optimiser for the T → 0 limit"
    ]


def test_readme_example_spec_validates() -> None:
    """The spec shown in the README is a valid spec."""
    import re

    readme = Path(__file__).parents[2].joinpath("README.md").read_text()
    section = readme.split("## The spec", 1)[1]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)[:1]
    import yaml

    load_spec(yaml.safe_load(block))


def test_unknown_report_template_is_a_spec_error(tiny_spec: Path) -> None:
    """A report template that does not exist is caught before any fit runs."""
    (message,) = problems(tiny_spec, ["report.template=nope"])
    assert message.startswith("override 'report.template=nope': report.template: report template 'nope' not found")
    assert "cold_posterior" in message


def test_the_resolved_spec_loads_back_with_the_same_stage_keys(tmp_path: Path) -> None:
    """``validate --resolved``'s YAML validates and plans the same stages under the same
    keys: a CSV split column's spec (its fractions left out) and a key set to null
    (``batch_size: null``, full batch, shown rather than dropped back to 128)."""
    from bayesflow.dag.plan import plan_cells

    data = "data:\n  name: csv\n  path: package:pima_indians_diabetes.csv\n  target: target\n  split_column: part\n"
    text = (TINY_SPEC.replace("data:\n  name: sklearn_digits\n  test_fraction: 0.5\n", data)
            .replace("name: categorical", "name: bernoulli")
            .replace("    epochs: 3\n  laplace:", "    epochs: 3\n    batch_size: null\n  laplace:"))
    loaded = load_spec(write(tmp_path, text))
    printed = loaded.to_yaml()
    assert "batch_size: null" in printed and "test_fraction" not in printed
    again = load_spec(write(tmp_path, printed, "resolved.yaml"))
    assert again.spec == loaded.spec

    def keys(spec: object) -> dict[str, str]:
        return {name: stage.key for name, stage in plan_cells(spec, "data").items()}  # type: ignore[arg-type]

    assert keys(again.spec) == keys(loaded.spec)


@pytest.mark.parametrize("block", ["model", "likelihood", "data"])
def test_a_name_that_is_not_a_string_is_a_spec_error(block: str) -> None:
    """`likelihood: {name: []}` (found by the mutation property): a located spec error, not a
    TypeError in the language-model checks."""
    spec = yaml.safe_load(TINY_SPEC)
    spec[block]["name"] = []
    with pytest.raises(SpecError, match=rf"{block}\.name"):
        load_spec(spec)
