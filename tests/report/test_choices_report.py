"""The multiple-choice report's pieces (:mod:`bayesflow.report.choices`): Laplace-LoRA's
Table 1 per temperature for the test questions and a shift set, the AUROC table, the
reliability frame and diagram from per-question probabilities."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesflow.report import choices


def results() -> pd.DataFrame:
    """MAP (temperature-free) and Laplace at T = 0.5 and 1, two seeds, with a shift set ``far``."""
    rows = []
    for method, temperatures in (("map", (0.0,)), ("laplace", (0.5, 1.0))):
        for temperature in temperatures:
            for seed in (0, 1):
                rows.append({
                    "method": method, "temperature": temperature, "temperature_shared": method == "map",
                    "seed": seed, "status": "FINISHED", "cell": f"{method}/{temperature}/{seed}",
                    "test_accuracy": 0.5 + 0.1 * seed, "test_ece": 0.1, "test_nll": 1.0 + temperature,
                    "shift_accuracy_far": 0.25, "shift_ece_far": 0.2 + 0.1 * seed, "shift_nll_far": 2.0,
                    "shift_auroc_total_far": 0.7, "shift_auroc_epistemic_far": 0.5 if method == "map" else 0.8,
                })
    return pd.DataFrame(rows)


def test_the_table_is_method_by_accuracy_ece_and_nll_per_temperature() -> None:
    """Shared fits first, then each temperature; mean ± sd over the two seeds."""
    table = choices.choice_table(results(), "test", ["map", "laplace"])
    assert table["T"].tolist() == ["shared", "0.5", "1"] and table["method"].tolist() == ["map", "laplace", "laplace"]
    assert table.loc[0, "accuracy"] == "0.550 ± 0.071" and table.loc[2, "NLL"] == "2.000 ± 0.000"
    far = choices.choice_table(results(), "far", ["map", "laplace"])
    assert far.loc[1, "ECE"] == "0.250 ± 0.071"
    assert choices.shift_sets(results()) == ["far"]
    aurocs = choices.auroc_table(results(), "far", ["map", "laplace"])
    assert aurocs.loc[0, "AUROC of EU"] == "0.500 ± 0.000" and list(aurocs["method"]) == ["map", "laplace", "laplace"]


def test_the_reliability_diagram_shows_each_bins_accuracy_and_confidence() -> None:
    """Confidence is the largest probability, correct its argmax against the label; the
    drawn points are the bins' mean confidence and accuracy."""
    frame = results().iloc[[0]]  # MAP, seed 0
    probabilities = np.array([[0.95, 0.05], [0.9, 0.1], [0.35, 0.65], [0.4, 0.6]])
    labels = np.array([0, 1, 1, 1])
    arrays = {"probabilities": probabilities, "labels": labels,
              "shift_far_probabilities": probabilities[:2], "shift_far_labels": labels[:2]}
    long = choices.reliability_frame(frame, {"map/0.0/0": arrays})
    assert sorted(pd.unique(long["set"])) == ["far", "test"]
    test = long[long["set"] == "test"]
    assert np.allclose(test["confidence"], [0.95, 0.9, 0.65, 0.6]) and test["correct"].tolist() == [True, False, True, True]
    figure = choices.reliability_diagram(long, "shared", bins=10)
    line = figure.axes[0].get_lines()[1]  # after the diagonal
    assert np.allclose(line.get_xdata(), [0.6, 0.65, 0.9, 0.95]) and np.allclose(line.get_ydata(), [1, 1, 0, 1])
    assert [axis.get_title() for axis in figure.axes] == ["test", "far"]
