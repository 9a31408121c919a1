"""End to end: the `bayesian_llm_ood` workflow, reduced to one epoch and two members,
through the real command line, MLflow and the report (Tables 1 and 2, Figures 7 and 10)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import byte_checkpoint_overrides

# e2e and slow, and skipped without transformers and peft or the shipped checkpoint
from tests.e2e.test_continual_lora import pytestmark  # noqa: F401
from tests.e2e.test_workflows import bayesflow, fits, report_html, succeeded, workflow

METHODS = ("base", "sgd", "deep_ensemble", "parallel_sghmc", "serial_sghmc")
# The shipped byte-level checkpoint and its last layer, pinned (the workflow's default, SmolLM2-135M,
# runs in tests/llm/test_pull.py), with the byte model's own step sizes.
SMALL = [
    *byte_checkpoint_overrides("bayesian_llm_ood"), "seeds=[0]",
    "methods.sgd.optimizer.lr=0.2", "methods.deep_ensemble.optimizer.lr=0.2",
    "methods.parallel_sghmc.lr=0.45", "methods.parallel_sghmc.alpha=0.22",
    "methods.serial_sghmc.lr=0.45", "methods.serial_sghmc.alpha=0.22",
    "evaluate.n_samples=3", "methods.sgd.epochs=1", "methods.deep_ensemble.epochs=1",
    "methods.deep_ensemble.members=2", "methods.parallel_sghmc.epochs=1", "methods.parallel_sghmc.chains=2",
    "methods.serial_sghmc.epochs=2", "methods.serial_sghmc.burn_in=4", "methods.serial_sghmc.thin=3",
]


def test_bayesian_llm_ood_runs_through_the_cli_and_draws_its_tables_and_figures(tmp_path: Path) -> None:
    succeeded(bayesflow(tmp_path, "run", workflow("bayesian_llm_ood"), *SMALL))
    runs = fits(tmp_path, "bayesian_llm_ood")
    assert {run.data.params["method"] for run in runs} == set(METHODS)
    for run in runs:
        metrics = run.data.metrics
        for name in ("cipher", "esperanto"):  # the two named out-of-distribution sets
            assert 0 <= metrics[f"statements_auroc_tu_{name}"] <= 1 and 0 <= metrics[f"statements_auroc_eu_{name}"] <= 1
        # Byte words of English science under a model pretrained on English reviews: less
        # surprising than their cipher.
        assert 0 < metrics["statements_nll_in"] < metrics["statements_nll_cipher"]
        one_vector = run.data.params["method"] in ("base", "sgd")
        assert (metrics["statements_eu_in"] == 0) == one_vector
        assert (metrics["statements_auroc_eu_cipher"] == 0.5) or not one_vector
    html = report_html(tmp_path, "bayesian_llm_ood")
    assert html.count("data:image/png;base64") >= 2
    assert "Table 1: AUROC of TU and EU" in html and "Table 2: loss" in html
    assert "letter-substitution cipher" in html and "Samoan" in html and "esperanto" in html
    assert "Traceback" not in html
