"""The evaluation's cross-key checks (reference method) and the data-free target pairing."""

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
