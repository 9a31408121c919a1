"""The command line without running a fit: validate, plan, schema and the registry listings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from bayesflow.cli import app
from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.plan import Stage
from bayesflow.dag.scheduler import execute
from bayesflow.spec import WorkflowSpec, load_spec
from bayesflow.spec.catalog import KINDS, entries, plot_entries
from bayesflow.spec.reference import markdown_reference
from tests.conftest import TINY_SPEC, write

# A narrow terminal: what the commands print to a pipe must not depend on its width.
NARROW = {"COLUMNS": "60"}


def invoke(*args: str) -> Any:
    """Run the command line in-process; stdout and stderr together in ``.output``."""
    return CliRunner().invoke(app, list(args), env=NARROW)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working folder holding the tiny spec (the stage cache goes there too)."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, TINY_SPEC)
    return tmp_path


def bad_spec(folder: Path) -> Path:
    """The tiny spec with one located mistake."""
    return write(folder, TINY_SPEC.replace("epochs: 3\n  laplace", "epochs: ten\n  laplace"), "bad.yaml")


# ---------------------------------------------------------------------------- validate


def test_validate_a_valid_spec(workdir: Path) -> None:
    """A valid spec exits 0 with a one-line summary."""
    result = invoke("validate", "spec.yaml")
    assert result.exit_code == 0
    assert result.output == "spec.yaml: valid (3 methods, 2 temperatures, 1 seed)\n"


def test_invalid_spec_exits_3_with_the_message_and_no_traceback(workdir: Path) -> None:
    """Every problem is printed, located; exit code 3; never a traceback."""
    path = bad_spec(workdir)
    result = invoke("validate", str(path))
    assert result.exit_code == 3
    assert result.output == (
        f"error: {path}: invalid workflow spec (1 problem):\n"
        f"  - {path}:20:5: methods.map.epochs: expected an integer, got 'ten'\n"
    )


@pytest.mark.parametrize(
    "text",
    ["", "- a\n", "a: [1\n", "name: a\n\tb: 1\n", "a: !!python/name:os.system x\n", "name: ${nope}\n"],
    ids=["empty", "list", "unclosed", "tab", "tag", "interpolation"],
)
def test_no_spec_mistake_shows_a_traceback(workdir: Path, text: str) -> None:
    """Broken YAML of every kind exits 3 with a message, without a traceback."""
    result = invoke("validate", str(write(workdir, text, "broken.yaml")))
    assert result.exit_code == 3
    assert result.output.startswith("error: ") and "Traceback" not in result.output


def test_debug_shows_the_traceback(workdir: Path) -> None:
    """With --debug the traceback comes first, then the same message and exit code."""
    path = bad_spec(workdir)
    result = invoke("--debug", "validate", str(path))
    assert result.exit_code == 3
    assert result.output.startswith("Traceback (most recent call last):")
    assert "bayesflow.errors.SpecError" in result.output
    assert result.output.endswith(f"  - {path}:20:5: methods.map.epochs: expected an integer, got 'ten'\n")


def test_unexpected_error_is_one_line_unless_debug(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug surfaces as one line asking for --debug; with it, the traceback."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("bayesflow.api.load", broken)
    result = invoke("validate", "spec.yaml")
    assert result.exit_code == 1
    assert result.output == (
        "internal error: RuntimeError: boom. This is a bug in bayesflow: rerun with --debug "
        "for the traceback and report it.\n"
    )
    debug = invoke("--debug", "validate", "spec.yaml")
    assert debug.exit_code == 1 and "Traceback (most recent call last):" in debug.output


@pytest.mark.slow
def test_debug_is_accepted_after_the_command(workdir: Path) -> None:
    """The installed entry point takes --debug anywhere; without it there is no traceback."""
    bad = bad_spec(workdir)
    environment = {**os.environ, **NARROW, "PYTHONPATH": str(Path(__file__).parents[1])}
    command = [sys.executable, "-c", "from bayesflow.cli import main; main()", "validate", str(bad)]
    options: dict[str, Any] = {"capture_output": True, "text": True, "env": environment, "timeout": 120}
    plain = subprocess.run(command, check=False, **options)
    debug = subprocess.run([*command, "--debug"], check=False, **options)
    assert plain.returncode == debug.returncode == 3
    assert "Traceback" not in plain.stderr + plain.stdout
    assert "Traceback (most recent call last):" in debug.stderr


def test_validate_resolved_prints_every_default(workdir: Path) -> None:
    """--resolved prints the spec with defaults filled in, and it loads back the same."""
    result = invoke("validate", "spec.yaml", "--resolved")
    assert result.exit_code == 0
    resolved = yaml.safe_load(result.output)
    assert (resolved["evaluate"]["n_samples"], resolved["evaluate"]["ece_bins"]) == (4, 10)
    assert resolved["methods"]["map"]["optimizer"]["momentum"] == 0.0
    assert resolved["methods"]["laplace"]["from"] == "map"
    assert resolved["execution"]["cache_dir"] == ".bayesflow/cache"
    assert load_spec(resolved).spec == load_spec(workdir / "spec.yaml").spec


def test_validate_with_overrides(workdir: Path) -> None:
    """Overrides after the spec apply; an unknown one exits 3 with a suggestion."""
    assert invoke("validate", "spec.yaml", "seeds=[0,1,2]").output == (
        "spec.yaml: valid (3 methods, 2 temperatures, 3 seeds)\n"
    )
    result = invoke("validate", "spec.yaml", "seed=[1]")
    assert result.exit_code == 3
    assert "override 'seed=[1]': the spec has no key `seed`; did you mean `seeds`?" in result.output


# -------------------------------------------------------------------------------- plan


def finish_every_stage(spec: str = "spec.yaml") -> None:
    """Fill the cache as a run would, without fitting anything."""
    from bayesflow.api import load, plan

    loaded = load(spec)

    def run_stage(stage: Stage, inputs: dict[str, Entry], staging: Path) -> dict[str, Any]:
        return {"stage": stage.name}

    execute(plan(loaded), run_stage, Cache(loaded.spec.execution.cache_dir))


def plan_rows(*overrides: str) -> list[dict[str, Any]]:
    """`bayesflow plan --json` as rows."""
    result = invoke("plan", "spec.yaml", *overrides, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_plan_marks_new_then_cached(workdir: Path) -> None:
    """Before a run every stage is new; after it, cached (plots and the report too)."""
    assert {row["status"] for row in plan_rows() if row["kind"] in ("fit", "evaluate")} == {"new"}
    finish_every_stage()
    rows = plan_rows()
    assert {row["status"] for row in rows if row["kind"] in ("fit", "evaluate")} == {"cached"}
    assert {row["status"] for row in rows if row["kind"] in ("plot", "report")} == {"cached"}


def test_plan_says_why_a_stage_is_stale(workdir: Path) -> None:
    """A changed hyper-parameter makes its stages stale, with what changed from what to what."""
    finish_every_stage()
    rows = {row["stage"]: row for row in plan_rows("methods.sghmc.lr=0.02")}
    assert rows["fit/sghmc/T=0.1/seed=0"]["status"] == "stale"
    assert rows["fit/sghmc/T=0.1/seed=0"]["reason"] == "methods.sghmc.lr changed 0.01 → 0.02"
    assert rows["evaluate/sghmc/T=0.1/seed=0"]["reason"] == "input fit/sghmc/T=0.1/seed=0 changed"
    assert rows["fit/map/T=shared/seed=0"]["status"] == "cached"
    assert rows["fit/map/T=shared/seed=0"]["reason"] == ""


def test_plan_reasons_for_data_and_shared_inputs(workdir: Path) -> None:
    """A changed data split is `data changed`; a changed MAP makes its Laplace stages stale."""
    finish_every_stage()
    rows = {row["stage"]: row for row in plan_rows("data.split_seed=1")}
    assert rows["fit/map/T=shared/seed=0"]["reason"] == "data changed"
    rows = {row["stage"]: row for row in plan_rows("methods.map.epochs=4")}
    assert rows["fit/map/T=shared/seed=0"]["reason"] == "methods.map.epochs changed 3 → 4"
    assert rows["curvature/laplace/seed=0"]["reason"] == "input fit/map/T=shared/seed=0 changed"
    assert rows["fit/laplace/T=1/seed=0"]["reason"] == "input curvature/laplace/seed=0 changed"


def test_plan_table_and_counts(workdir: Path) -> None:
    """The table shows each stage's status and reason, then the counts per kind and status."""
    finish_every_stage()
    result = invoke("plan", "spec.yaml", "methods.sghmc.lr=0.02")
    assert result.exit_code == 0
    assert "methods.sghmc.lr changed 0.01 → 0.02" in result.output
    assert result.output.endswith(
        "fit: 3 cached, 2 stale\nevaluate: 3 cached, 2 stale\ncurvature: 1 cached\nplot: 2 stale\n"
        "report: 1 stale\n14 stages: 7 cached, 7 stale\n"
    )


def test_plan_dag_is_indented_text(workdir: Path) -> None:
    """--dag prints each stage, inputs first, with its inputs indented below it."""
    result = invoke("plan", "spec.yaml", "--dag")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    laplace = lines.index("fit/laplace/T=0.1/seed=0  [new]")
    assert lines[laplace + 1] == "    <- curvature/laplace/seed=0"
    curvature = lines.index("curvature/laplace/seed=0  [new]")
    assert lines[curvature + 1] == "    <- fit/map/T=shared/seed=0"
    assert lines.index("fit/map/T=shared/seed=0  [new]") < curvature < laplace
    assert "report  [new]" in lines


# ------------------------------------------------------------------------------ schema


def test_schema_is_the_models_json_schema(workdir: Path) -> None:
    """`bayesflow schema` prints the JSON Schema; -o writes it to a file."""
    result = invoke("schema")
    assert json.loads(result.output) == WorkflowSpec.model_json_schema(by_alias=True)
    assert invoke("schema", "-o", "schema.json").exit_code == 0
    assert json.loads((workdir / "schema.json").read_text()) == json.loads(result.output)


def test_schema_markdown_is_the_reference(workdir: Path) -> None:
    """`bayesflow schema --markdown` prints docs/spec.md's content."""
    assert invoke("schema", "--markdown").output == markdown_reference()


# ---------------------------------------------------------------------------- listings


@pytest.mark.parametrize("kind", list(KINDS))
def test_listing_names_every_entry_with_defaults(kind: str) -> None:
    """Each registry listing names every entry and its keys with defaults."""
    result = invoke(kind)
    assert result.exit_code == 0
    for entry in entries(kind):
        assert f"\n{', '.join(entry.names)}\n" in f"\n{result.output}"
        for parameter in entry.parameters:
            assert f"{parameter.key}=" in result.output or f"{parameter.key} (required)" in result.output


def test_listing_one_entry_in_detail() -> None:
    """`bayesflow engines sghmc` shows each key's type, default and description."""
    result = invoke("engines", "sghmc")
    assert result.exit_code == 0
    assert "Step size ε" in result.output and "integer ≥ 0" in result.output


def test_listing_an_unknown_entry_suggests() -> None:
    """A misspelt name is a usage error (exit 2) with the closest name."""
    result = invoke("models", "mpl")
    assert result.exit_code == 2
    assert result.output.startswith("error: unknown model 'mpl'; did you mean 'mlp'?")


def test_plots_listing() -> None:
    """`bayesflow plots` lists every plot a spec may name."""
    output = invoke("plots").output
    assert all(name in output for name, _ in plot_entries())


def test_help_lists_every_command() -> None:
    """The top-level help names every command, the listings in their own panel."""
    output = invoke("--help").output
    for command in ("validate", "plan", "run", "ui", "schema", "lm-eval", *KINDS, "plots"):
        assert f" {command} " in output
    assert "Registries" in output


# ------------------------------------------------------------------ version and ui


def test_version_prints_the_installed_version() -> None:
    """--version prints the package's version and exits 0."""
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output == f"bayesflow {version('bayesflow-workflows')}\n"


def test_ui_refuses_a_busy_port(workdir: Path) -> None:
    """`ui` on a port something already listens on exits 2 with what to do, before MLflow starts."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = invoke("ui", "--port", str(port))
    assert result.exit_code == 2
    assert f"cannot serve the UI on 127.0.0.1:{port}" in result.output
    assert "pick a free port with --port" in result.output
    assert not (workdir / "mlflow.db").exists()


@pytest.mark.slow
def test_ui_opens_on_the_runs_table_of_the_latest_experiment(workdir: Path) -> None:
    """The address `ui` prints is the runs table of the experiment that logged last (MLflow 3
    opens on its GenAI home otherwise); an empty folder gets the experiment list and no store."""
    import mlflow

    from bayesflow.cli.store import runs_page

    assert runs_page("sqlite:///mlflow.db") == "#/experiments?workflowType=machine_learning"
    assert not (workdir / "mlflow.db").exists()
    client = mlflow.MlflowClient("sqlite:///mlflow.db")
    first, latest = client.create_experiment("first"), client.create_experiment("latest")
    client.set_terminated(client.create_run(first, start_time=1_000).info.run_id)
    client.set_terminated(client.create_run(latest, start_time=2_000).info.run_id)
    assert runs_page("sqlite:///mlflow.db") == f"#/experiments/{latest}/runs?workflowType=machine_learning"


def test_ui_refuses_a_port_out_of_range() -> None:
    """A port above 65535 is a usage error (exit 2)."""
    assert invoke("ui", "--port", "70000").exit_code == 2



def test_run_wait_zero_refuses_a_busy_cache(workdir: Path) -> None:
    """`run --wait 0` exits 1 at once, naming the run that holds the cache folder."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from bayesflow.dag.cache import Cache\n"
         "with Cache('.bayesflow/cache').lock():\n    print('held', flush=True); time.sleep(3600)"],  # until killed
        cwd=workdir, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = invoke("run", "spec.yaml", "--wait", "0")
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 1
    assert f"in use by run PID {holder.pid}" in result.output


def test_validate_names_a_template_path_as_user_code(workdir: Path) -> None:
    """A report template given as a path is listed as code the run will execute."""
    import shutil

    from bayesflow.report import find_template

    (workdir / "mine").mkdir()
    shutil.copy(find_template("cold_posterior"), workdir / "mine" / "report.py")
    result = invoke("validate", "spec.yaml", "report.template=mine/report.py")
    assert result.exit_code == 0
    assert "runs your code: report.template mine/report.py (a notebook, executed by the report kernel)" in result.output
