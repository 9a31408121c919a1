"""End to end: a run with a validation split logs `val_*` to a real MLflow store and its
report chooses the best temperature on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TINY_SPEC, write
from tests.e2e.test_cli import bayesflow, client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_every_fit_logs_val_metrics_and_the_report_chooses_on_them(tmp_path: Path) -> None:
    write(tmp_path, TINY_SPEC)
    result = bayesflow(tmp_path, "run", "spec.yaml", "data.validation_fraction=0.2")
    assert result.returncode == 0, result.stdout + result.stderr
    mlflow = client(tmp_path)
    experiment = mlflow.get_experiment_by_name("tiny")
    children = [r for r in mlflow.search_runs([experiment.experiment_id]) if "method" in r.data.params]
    assert len(children) == 5
    for run in children:
        tested = {name.removeprefix("test_") for name in run.data.metrics if name.startswith("test_")}
        validated = {name.removeprefix("val_") for name in run.data.metrics if name.startswith("val_")}
        assert tested and validated == tested
        assert "validation rows" in run.data.tags["convention.val_nll"]
    (report,) = tmp_path.glob("reports/tiny/*/report.html")
    text = report.read_text()
    assert "chosen on" in text and "lowest mean <strong>validation</strong> NLL" in text
