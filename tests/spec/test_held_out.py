"""`data.test_fraction: 0`: every CSV row fits, and what needs held-out rows is refused."""

from __future__ import annotations

import pytest

from bayesflow.data.tabular import csv
from bayesflow.errors import SpecError
from bayesflow.spec import load_spec


def test_a_zero_test_fraction_keeps_every_row() -> None:
    """All 768 Pima rows train, standardised over all of them; the test set is empty."""
    data = csv("package:pima_indians_diabetes.csv", "target", test_fraction=0)
    assert data.x_train.shape == (768, 8) and data.x_test.shape == (0, 8) and len(data.y_test) == 0
    assert abs(data.x_train.mean(0)).max() < 1e-5 and abs(data.x_train.std(0) - 1).max() < 1e-4


def problems(*overrides: str) -> list[str]:
    """The problems of the bundled Pima workflow with overrides (empty when it loads)."""
    try:
        load_spec("pima_logistic", list(overrides))
    except SpecError as error:
        return error.problems
    return []


def test_the_pima_workflow_holds_nothing_out_and_validates() -> None:
    """The shipped workflow has test_fraction 0 and `plots: []`: valid."""
    assert problems() == []
    assert load_spec("pima_logistic").spec.data.test_fraction == 0


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["plots=[nll_vs_temperature]"], "plots:", "need held-out data"),
        (["plots=null"], "data.test_fraction:", "draws the task's predictive plots"),
        (["evaluate.prior_predictive=true"], "evaluate.prior_predictive:", "held-out rows"),
    ],
)
def test_what_needs_held_out_rows_is_refused(overrides: list[str], key: str, words: str) -> None:
    """Predictive plots (listed, or the defaults when `plots` is left out) and the prior
    predictive check are refused with the key and the fix."""
    found = [problem for problem in problems(*overrides) if key in problem]
    assert len(found) == 1 and words in found[0] and "test_fraction=0.25" in found[0], found


def test_held_out_rows_lift_the_refusal() -> None:
    """With rows held out the same plots validate."""
    assert problems("data.test_fraction=0.25", "plots=[nll_vs_temperature]") == []
