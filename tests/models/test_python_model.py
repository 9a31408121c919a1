"""The escape hatch: a user's own torch module from `package.module:factory`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from bayesflow.errors import SpecError
from bayesflow.likelihoods import categorical
from bayesflow.models import build_model
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem

USER_MODULE = """\
import torch
from torch import nn


def make_net(num_features, num_outputs, width=4):
    return nn.Sequential(nn.Linear(num_features, width), nn.Tanh(), nn.Linear(width, num_outputs))


NOT_A_FACTORY = 3
"""


@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path holding the user's module `user_networks`."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "user_networks.py").write_text(USER_MODULE)
    monkeypatch.delitem(sys.modules, "user_networks", raising=False)
    yield tmp_path
    sys.modules.pop("user_networks", None)


def test_factory_gets_sizes_and_extra_keys(user_folder: Path) -> None:
    """The factory is called with num_features, num_outputs and the spec's extra keys."""
    model = build_model({"name": "python", "python": "user_networks:make_net", "width": 6}, 3, 2)
    assert [tuple(p.shape) for p in model.parameters()] == [(6, 3), (6,), (2, 6), (2,)]


def test_user_module_runs_through_functional_call(user_folder: Path) -> None:
    """A user's module becomes a flat-parameter problem like the built-ins."""
    model = build_model({"name": "python", "python": "user_networks:make_net"}, 3, 2)
    problem = build_problem(model, categorical(), diag_normal(), 8)
    params = problem.init_params(torch.Generator().manual_seed(0))
    assert problem.dimension == 4 * 3 + 4 + 2 * 4 + 2
    assert problem.forward(params, torch.randn(5, 3)).shape == (5, 2)


def test_module_found_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module in the working directory is importable even when it is not on sys.path."""
    (tmp_path / "cwd_networks.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))]
    )
    monkeypatch.delitem(sys.modules, "cwd_networks", raising=False)
    model = build_model({"name": "python", "python": "cwd_networks:make_net"}, 3, 2)
    assert model(torch.randn(1, 3)).shape == (1, 2)
    assert str(tmp_path) not in sys.path
    sys.modules.pop("cwd_networks", None)


def test_missing_module_says_where_it_must_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unimportable module names the module, the working directory and the fix."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        build_model({"name": "python", "python": "no_such_networks:make_net"}, 3, 2)
    assert caught.value.problems == [
        (
            "model.python: cannot import module 'no_such_networks' (No module named "
            f"'no_such_networks'); the module must be importable from the working directory "
            f"({tmp_path}) or installed in this environment (for example `pip install -e .` in "
            "your project)"
        )
    ]


def test_missing_dependency_of_the_module_is_named(user_folder: Path) -> None:
    """A module that imports a missing package names that package, not the module."""
    (user_folder / "broken_networks.py").write_text("import no_such_dependency\n")
    with pytest.raises(
        SpecError,
        match="'broken_networks' was found, but importing it failed: "
        r"No module named 'no_such_dependency' at .*broken_networks.py:1 in <module>: "
        "`import no_such_dependency`; install 'no_such_dependency'",
    ):
        build_model({"name": "python", "python": "broken_networks:make_net"}, 3, 2)
    sys.modules.pop("broken_networks", None)


def test_missing_factory_suggests_the_closest(user_folder: Path) -> None:
    """A misspelt factory is reported with the module's file and a suggestion."""
    with pytest.raises(SpecError) as caught:
        build_model({"name": "python", "python": "user_networks:make_nett"}, 3, 2)
    assert caught.value.problems == [
        (
            f"model.python: module 'user_networks' ({user_folder / 'user_networks.py'}) has no "
            "attribute 'make_nett'; did you mean 'make_net'? (it defines: make_net)"
        )
    ]


def test_factory_with_the_wrong_signature_shows_it(user_folder: Path) -> None:
    """An unexpected keyword says how the factory is called and what it accepts."""
    with pytest.raises(
        SpecError,
        match=r"make_net\(num_features=3, num_outputs=2, depth=2\) "
        r"raised TypeError: .*its signature: make_net\(num_features, num_outputs, width=4\)",
    ):
        build_model({"name": "python", "python": "user_networks:make_net", "depth": 2}, 3, 2)


def test_factory_must_return_a_module(user_folder: Path) -> None:
    """A name that is not a function, or a function returning no module, is refused."""
    with pytest.raises(SpecError, match="is a int, not a function"):
        build_model({"name": "python", "python": "user_networks:NOT_A_FACTORY"}, 3, 2)
    (user_folder / "odd_networks.py").write_text(
        "def make(num_features, num_outputs):\n    return 3\n"
    )
    with pytest.raises(SpecError, match=r"returned a int; expected a torch.nn.Module"):
        build_model({"name": "python", "python": "odd_networks:make"}, 3, 2)
    sys.modules.pop("odd_networks", None)


def test_spec_accepts_extra_keys_for_python_only() -> None:
    """`python` models keep their extra keys; built-ins still forbid unknown keys."""
    from pydantic import TypeAdapter, ValidationError

    from bayesflow.spec.blocks import ModelSpec

    adapter = TypeAdapter(ModelSpec)
    spec = adapter.validate_python({"name": "python", "python": "pkg.mod:make", "width": 8})
    assert spec.model_dump() == {"name": "python", "python": "pkg.mod:make", "width": 8}
    with pytest.raises(ValidationError, match="extra_forbidden|Extra inputs"):
        adapter.validate_python({"name": "mlp", "width": 8})


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"name": "python", "python": "pkg.mod"}, "expected `package.module:factory`"),
        (
            {"name": "python", "python": "pkg.mod:make", "num_outputs": 3},
            "num_outputs are set from the data",
        ),
    ],
)
def test_spec_checks_the_python_target(model: dict, message: str) -> None:
    """A malformed target or a reserved key is a spec error."""
    from pydantic import TypeAdapter, ValidationError

    from bayesflow.spec.blocks import ModelSpec

    with pytest.raises(ValidationError, match=message):
        TypeAdapter(ModelSpec).validate_python(model)
