"""The report's evidence table: evidence at the spec's prior and the chosen one, beside the grid."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesflow.report import evidence, tables

from .conftest import synthetic_results
from .test_validation_choice import with_validation


def with_evidence() -> pd.DataFrame:
    """The synthetic frame with an evidence on its Laplace rows and an evidence-chosen
    Laplace (`laplace_auto`) whose T = 1 predicts as well as `laplace` at its best T."""
    frame = synthetic_results()
    frame["log_evidence"] = np.where(frame["method"] == "laplace", -500.0 - frame["seed"], np.nan)
    auto = frame.loc[frame["method"] == "laplace"].copy()
    auto["method"] = "laplace_auto"
    auto["cell"] = auto["cell"].str.replace("laplace", "laplace_auto")
    auto["status"] = "FINISHED"
    auto["log_evidence_spec_prior"] = auto["log_evidence"]
    auto["log_evidence"] = -450.0 - auto["seed"]
    auto["prior_variance_chosen"] = 0.05 + 0.01 * auto["seed"]
    auto["test_nll"] = 0.29 + 0.01 * auto["temperature"]
    return pd.concat([frame, auto], ignore_index=True)


def test_the_table_shows_both_priors_per_laplace_method() -> None:
    """One row per Laplace method; mean ± sd over seeds; no row for MAP or SGHMC."""
    table = evidence.evidence_table(with_evidence()).set_index("method")
    assert table.index.tolist() == ["laplace", "laplace_auto"]
    assert evidence.NOISE not in table.columns  # no fit chose a noise
    assert table.loc["laplace", "prior"] == "spec"
    assert table.loc["laplace", evidence.SPEC_PRIOR] == "-500.500 ± 0.707"
    assert table.loc["laplace", evidence.VARIANCE] == "—"
    assert table.loc["laplace", evidence.BEST_T] == "0.1"
    assert table.loc["laplace", tables.CHOSEN_ON] == "test"  # no validation rows: said so
    auto = table.loc["laplace_auto"]
    assert auto["prior"] == "evidence"
    assert auto[evidence.SPEC_PRIOR] == "-500.500 ± 0.707"
    assert auto[evidence.CHOSEN_PRIOR] == "-450.500 ± 0.707"
    assert auto[evidence.VARIANCE] == "0.055 ± 0.00707"
    assert auto[evidence.AT_ONE] == "0.300 ± 0.000"
    assert auto[evidence.BEST_T] == "0.1" and auto[evidence.AT_BEST] == "0.291 ± 0.000"


def test_the_section_compares_the_chosen_prior_at_one_with_the_best_temperature() -> None:
    """A sentence per evidence-chosen method names its T = 1 NLL and the spec prior's best."""
    text, _ = evidence.evidence_section(with_evidence())
    assert ("`laplace_auto` at T = 1 (prior variance 0.055 ± 0.00707): test NLL 0.300 ± 0.000; `laplace` "
            "(the spec's prior) at its best T = 0.1 (chosen on test): 0.310 ± 0.007") in text
    assert "optimistic" in text


def test_the_best_temperature_is_chosen_on_validation_as_in_the_rest_of_the_report() -> None:
    """With `val_nll` (lowest at T = 1, the test NLL at T = 0.1) the evidence table picks
    the temperature the best-temperature table picks, says `validation`, and reports the
    test NLL there; the text no longer calls the choice one made on the test NLL."""
    frame = with_validation(with_evidence())
    table = evidence.evidence_table(frame).set_index("method")
    best = tables.best_temperature_table(frame).set_index("method")
    for method in ("laplace", "laplace_auto"):
        assert table.loc[method, evidence.BEST_T] == best.loc[method, "best T"] == "1"
        assert table.loc[method, tables.CHOSEN_ON] == "validation"
    assert table.loc["laplace", evidence.AT_BEST] == best.loc["laplace", "test_nll"] == "0.340 ± 0.007"
    assert table.loc["laplace_auto", evidence.AT_BEST] == "0.300 ± 0.000"
    text, _ = evidence.evidence_section(frame)
    assert "lowest mean **validation** NLL" in text and "optimistic" not in text
    assert "at its best T = 1 (chosen on validation): 0.340 ± 0.007" in text


def test_per_tensor_variances_are_listed_by_tensor() -> None:
    """`auto_per_tensor` logs one variance per tensor; the table lists each tensor's mean."""
    frame = with_evidence()
    auto = frame["method"] == "laplace_auto"
    frame = frame.drop(columns="prior_variance_chosen")
    frame.loc[auto, "prior_variance_chosen/0.weight"] = 0.25
    frame.loc[auto, "prior_variance_chosen/0.bias"] = 0.5 + 0.1 * frame.loc[auto, "seed"]
    table = evidence.evidence_table(frame).set_index("method")
    assert table.loc["laplace_auto", evidence.VARIANCE] == "0.weight 0.25, 0.bias 0.55"
    assert table.loc["laplace_auto", "prior"] == "evidence"


def test_no_laplace_no_table() -> None:
    """A frame without evidence gives an empty table and says why."""
    text, table = evidence.evidence_section(synthetic_results())
    assert table.empty and "No Laplace fit logged an evidence" in text
