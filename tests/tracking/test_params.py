"""What a fit run carries as params and tags, as seen in the MLflow UI."""

from __future__ import annotations

from pathlib import Path

from bayesflow.dag.plan import plan_workflow
from bayesflow.spec import load_spec
from bayesflow.tracking.hook import fit_parameters, process_tags
from tests.conftest import TINY_SPEC, write


def test_fit_params_hold_every_cell_key_and_no_python_none(tmp_path: Path) -> None:
    """Model, prior and data keys are params, log10(T) is one, and unset values read `null`."""
    loaded = load_spec(write(tmp_path, TINY_SPEC))
    stage = plan_workflow(loaded.spec, "d").stages["fit/sghmc/T=0.1/seed=0"]
    params = fit_parameters(loaded, stage)
    assert params["model.hidden"] == [8]
    assert params["prior.variance"] == 1.0 and params["data.test_fraction"] == 0.5
    assert abs(params["log10_temperature"] - (-1.0)) < 1e-12
    assert params["from"] == "null"
    assert None not in params.values() and "None" not in map(str, params.values())
    assert {"method", "engine", "temperature", "seed"} <= params.keys()


def test_shared_fits_have_no_log_temperature(tmp_path: Path) -> None:
    """A fit shared by every temperature (logged at T = 0) has no log10_temperature."""
    loaded = load_spec(write(tmp_path, TINY_SPEC))
    stage = plan_workflow(loaded.spec, "d").stages["fit/map/T=shared/seed=0"]
    assert "log10_temperature" not in fit_parameters(loaded, stage)


def test_runs_carry_the_standard_system_tags() -> None:
    """mlflow.user, mlflow.source.* and bayesflow.version, as MLflow's own runs have."""
    tags = process_tags()
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.name"].startswith("bayesflow")
    assert tags["bayesflow.version"]
