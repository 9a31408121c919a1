"""End to end: the `continual_lora` workflow, reduced to two documents, short windows and
one epoch, through the real command line, MLflow and the report (Figures 5 and 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import byte_checkpoint_overrides
from tests.e2e.test_workflows import bayesflow, client, fits, report_html, succeeded, workflow

pytest.importorskip("transformers")
pytest.importorskip("peft")
CHECKPOINT = Path(__file__).parents[2] / "bayesflow" / "data" / "files" / "lm" / "checkpoint"
pytestmark = [
    pytest.mark.e2e, pytest.mark.slow,
    pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(),
                       reason="the shipped checkpoint (package:lm/checkpoint) is not in this checkout"),
]

METHODS = ("online_adamw", "laplace_prior", "offline", "single_episode")
# The shipped byte-level checkpoint, pinned (the workflow's default is SmolLM2-135M: docs/llm.md),
# two documents, short windows, one epoch.
BYTE_MODEL = byte_checkpoint_overrides("continual_lora")
SMALL = [*BYTE_MODEL, "data.max_documents=2", "data.length=64", "data.stride=64", "data.scored=16",
         *(f"methods.{name}.epochs=1" for name in METHODS)]


def test_continual_lora_runs_through_the_cli_and_draws_figures_5_and_6(tmp_path: Path) -> None:
    succeeded(bayesflow(tmp_path, "run", workflow("continual_lora"), *SMALL))
    runs = fits(tmp_path, "continual_lora")
    assert {run.data.params["method"] for run in runs} == set(METHODS)
    mlflow = client(tmp_path)
    for run in runs:
        seen = mlflow.get_metric_history(run.info.run_id, "trace/seen_average_nll")
        second = mlflow.get_metric_history(run.info.run_id, "trace/episode_nll/1")
        assert len(seen) == 2 and len(second) == 2
        # Byte tokens of English prose under a model pretrained on English: well below
        # the uniform log 256 = 5.55 nats.
        assert all(0 < point.value < 4 for point in seen + second)
    html = report_html(tmp_path, "continual_lora")
    assert html.count("data:image/png;base64") >= 2
    assert "vs single-episode" in html and "forgetting" in html and "λ = 100" in html
    assert "Traceback" not in html
