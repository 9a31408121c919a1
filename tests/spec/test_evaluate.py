"""The evaluation's cross-key checks (reference method, its temperature) and the data-free
target pairing."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, write


def problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    """The problems load_spec reports for ``path``."""
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return info.value.problems


def test_reference_must_name_a_method(tmp_path: Path) -> None:
    """`evaluate.reference` naming no method is located at its line, with the methods listed."""
    path = write(tmp_path, TINY_SPEC.replace("evaluate:\n", "evaluate:\n  reference: nuts\n"))
    assert problems(path) == [
        f"{path}:31:3: evaluate.reference: names 'nuts', which is not a method (methods: "
        + "map, laplace, sghmc)"
    ]


def test_a_reference_mapping_is_checked_at_its_keys(tmp_path: Path) -> None:
    """`{method: ...}` naming no method, a `temperature` off the grid, and a temperature for
    a method fitted once for every temperature are each located at their key."""
    reference = "evaluate:\n  reference:\n    method: {method}\n    temperature: {temperature}\n"
    unknown = write(tmp_path, TINY_SPEC.replace("evaluate:\n", reference.format(method="nuts", temperature=1)))
    assert problems(unknown) == [(
        f"{unknown}:32:5: evaluate.reference.method: names 'nuts', which is not a method "
        "(methods: map, laplace, sghmc)"
    )]
    off_grid = write(tmp_path, TINY_SPEC.replace("evaluate:\n", reference.format(method="sghmc", temperature=0.5)))
    (problem,) = problems(off_grid)
    assert problem.startswith(f"{off_grid}:33:5: evaluate.reference.temperature: is 0.5, which is not in")
    assert "add 0.5 to it, or drop `temperature`" in problem
    shared = write(tmp_path, TINY_SPEC.replace("evaluate:\n", reference.format(method="map", temperature=1)))
    (problem,) = problems(shared)
    assert problem.startswith(f"{shared}:33:5: evaluate.reference.temperature: 'map' (map) is fitted once")


def test_reference_shorthand_is_the_method_form(tmp_path: Path) -> None:
    """`reference: sghmc` validates to `{method: sghmc}`; a grid temperature written as 1.0
    passes."""
    short = load_spec(write(tmp_path, TINY_SPEC.replace("evaluate:\n", "evaluate:\n  reference: sghmc\n")))
    assert short.spec.evaluate.reference.model_dump(exclude_none=True) == {"method": "sghmc"}
    stated = load_spec(write(tmp_path, TINY_SPEC), ["+evaluate.reference={method: sghmc, temperature: 1.0}"])
    assert stated.spec.evaluate.reference.temperature == 1.0


def test_ksd_settings_are_checked(tmp_path: Path) -> None:
    """An unknown KSD kernel is refused with the kernels that exist."""
    path = write(tmp_path, TINY_SPEC.replace("evaluate:\n", "evaluate:\n  ksd: {kernel: gauss}\n"))
    assert problems(path) == [
        f"{path}:31:9: evaluate.ksd.kernel: expected one of: imq, rbf, got 'gauss'"
    ]


def test_energy_likelihood_needs_data_none(tmp_path: Path) -> None:
    """The `energy` likelihood on real data is refused, naming the pairing to use."""
    path = write(tmp_path, TINY_SPEC)
    (problem,) = problems(path, ["likelihood.name=energy"])
    assert problem.endswith(
        "likelihood.name: the `energy` likelihood (the model's output is the log density) goes "
        "with `data: {name: none}` and only with it, but got `energy` on sklearn_digits; pair "
        "them, e.g. with `model: {name: double_well}`"
    )
