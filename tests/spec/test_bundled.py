"""Bundled workflows run by name and are listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bayesflow.cli import app
from bayesflow.errors import BayesflowError, SpecError
from bayesflow.spec import load_spec
from bayesflow.spec.bundled import bundled_workflows, resolve_spec_path


def test_every_bundled_workflow_is_found_in_the_checkouts_workflows_folder() -> None:
    """From a checkout, the bundled workflows are the top-level workflows/ folder's files."""
    found = bundled_workflows()
    assert {"cold_posterior", "pima_logistic", "double_well"} <= set(found)
    root = Path(__file__).parents[2]
    assert all(path.parent == root / "workflows" for path in found.values())


def test_a_bundled_workflow_loads_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cold_posterior` with no such file here is the bundled workflow."""
    monkeypatch.chdir(tmp_path)
    loaded = load_spec("cold_posterior", ["seeds=[0]"])
    assert loaded.spec.name == "cold_posterior"
    assert loaded.path == bundled_workflows()["cold_posterior"]


def test_a_local_file_wins_over_a_bundled_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of that name in the working directory is read, not the bundled one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cold_posterior").write_text("x: 1\n")
    assert resolve_spec_path("cold_posterior") == Path("cold_posterior")


def test_an_unknown_name_suggests_the_closest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt name is a spec error naming the close match and the bundled names."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="did you mean 'cold_posterior'"):
        load_spec("cold_postrior")


def test_the_workflows_command_lists_them_with_their_question() -> None:
    """`bayesflow workflows` shows every name and the first sentence of its description."""
    result = CliRunner().invoke(app, ["workflows"])
    assert result.exit_code == 0
    for name in bundled_workflows():
        assert name in result.output
    assert "Does a cold posterior (T < 1) predict better than the Bayes posterior (T = 1)?" in result.output


def test_a_relative_data_path_override_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`data.path=` on the command line is relative to where the command runs, not to the
    (possibly bundled) spec file; written in the file it stays relative to the file."""
    here = tmp_path / "work"
    here.mkdir()
    (here / "table.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(20)))
    monkeypatch.chdir(here)
    loaded = load_spec("pima_logistic", ["data.path=table.csv", "data.target=y", "seeds=[0]"])
    assert loaded.spec.data.path == str(here / "table.csv")
    assert load_spec("pima_logistic").spec.data.path.startswith("package:")


def test_shipped_folders_prefer_the_wheels_copy_inside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the package (a wheel) wins; beside it (a checkout) is next; a folder holding no
    specs, such as a stale __pycache__ of an older checkout, is neither."""
    from bayesflow import shipped

    package = tmp_path / "bayesflow"
    (package / "workflows" / "__pycache__").mkdir(parents=True)
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "beside.yaml").write_text("name: beside\n")
    monkeypatch.setattr(shipped, "PACKAGE", package)
    assert shipped.shipped_folder("workflows") == tmp_path / "workflows"
    (package / "workflows" / "inside.yaml").write_text("name: inside\n")
    assert shipped.shipped_folder("workflows") == package / "workflows"
    with pytest.raises(BayesflowError, match="the shipped templates are missing"):
        shipped.shipped_folder("templates")
