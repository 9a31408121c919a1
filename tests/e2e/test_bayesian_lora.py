"""End to end: multiple-choice questions with a shift set on a tiny config-built Llama, MAP
and a diagonal Laplace at two temperatures and two seeds, through MLflow and the
`bayesian_lora` report (Table 1 per temperature, the shift set's table and AUROCs,
reliability diagrams, the cold-posterior curves)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bayesflow
from tests.conftest import byte_checkpoint_overrides
from tests.e2e.test_workflows import bayesflow as cli
from tests.e2e.test_workflows import fits, report_html, succeeded, workflow
from tests.llm.spec_helpers import write_spec
from tests.llm.test_choice_shift import shifted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # about 30 s on the shared 2-core CPU

METHODS = {"map": {"engine": "map", "optimizer": {"name": "adamw", "lr": 0.01}, "epochs": 2, "batch_size": 4},
           "laplace": {"engine": "laplace_diag_ggn", "from": "map"}}


def test_a_tiny_multiple_choice_run_renders_the_bayesian_lora_report(tmp_path: Path) -> None:
    """Every section renders from the run's metrics and per-question probabilities, no traceback."""
    spec = {**shifted_spec(tmp_path, methods=METHODS), "temperatures": [0.5, 1.0], "seeds": [0, 1],
            "report": {"template": "bayesian_lora", "output_dir": str(tmp_path / "reports")},
            "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"},
            "execution": {"cache_dir": str(tmp_path / "cache")}}
    result = bayesflow.run(bayesflow.load(write_spec(tmp_path, spec)))
    assert result.exit_code == 0, result.outcome.errors
    (report,) = (tmp_path / "reports").glob("mc_tiny/*/report.html")
    html = report.read_text()
    # two reliability diagrams (T = 0.5, 1) and ECE and NLL against T for the test and shift sets
    assert html.count("data:image/png;base64") >= 6
    text = re.sub(r"<[^>]+>", " ", html)
    for heading in ("The answer", "Table 1: the test questions", "Under distribution shift", "Reliability",
                    "The cold-posterior curve"):
        assert heading in text, heading
    assert "AUROC of EU" in text and "shared" in text and "Traceback" not in text


BUNDLED_METHODS = ("base", "map", "deep_ensemble", "laplace", "mc_dropout", "ivon", "swag")
# The bundled workflow on the shipped byte-level checkpoint (its folder tokenizer), one seed,
# 40 questions of each file, one epoch each.
SMALL = [*byte_checkpoint_overrides("bayesian_lora"), "seeds=[0]", "data.max_questions=40",
         "methods.deep_ensemble.members=2", "methods.swag.epochs=2", "methods.swag.burn_in=0", "evaluate.n_samples=2",
         *(f"methods.{name}.epochs=1" for name in ("map", "deep_ensemble", "mc_dropout", "ivon"))]


def test_the_bundled_workflow_runs_through_the_cli_and_renders_its_report(tmp_path: Path) -> None:
    """`bayesflow run bayesian_lora`, reduced, on the byte checkpoint: every method and
    temperature logs the test and shift metrics; the report renders Table 1."""
    succeeded(cli(tmp_path, "run", workflow("bayesian_lora"), *SMALL))
    runs = fits(tmp_path, "bayesian_lora")
    assert {run.data.params["method"] for run in runs} == set(BUNDLED_METHODS)
    assert len(runs) == 4 + 2 * 3  # base, map, the ensemble and MC dropout once; the rest at T = 1 and 0.1
    for run in runs:
        metrics = run.data.metrics
        for name in ("test_accuracy", "test_ece", "shift_accuracy_other_subjects", "shift_ece_other_subjects"):
            assert 0 <= metrics[name] <= 1, (run.data.params["method"], name)
        assert metrics["test_nll"] > 0 and metrics["shift_nll_other_subjects"] > 0
    html = report_html(tmp_path, "bayesian_lora")
    assert "Traceback" not in html and html.count("data:image/png;base64") >= 2
