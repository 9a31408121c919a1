"""The shared report sections, the papers' figures and the comparison of runs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesflow.report import compare, experiments, sections


def test_sections_say_what_ran_and_where(results_frame: pd.DataFrame) -> None:
    """What ran counts fits and lists the failed one; the links name every fit run."""
    text = sections.what_ran(results_frame)
    assert "**14** fits: **13** finished, **1** failed" in text
    assert "`sghmc` T=3 seed 1 (FAILED: diverged)" in text
    links = sections.run_links("parent", "sqlite:///x.db", results_frame)
    assert "- MLflow run: `parent`" in links and links.count("runs:/run-") == 14
    by_cell = sections.run_links([], "", results_frame.drop(columns="run_id"))
    assert "the parent run this report is logged to" in by_cell
    assert "`fit/sghmc/T=3/seed=1`" in by_cell and "runs:/" not in by_cell.split("\n\n")[1]
    assert sections.header("w", "description: studies X\n") == "**Workflow:** `w`\n\nstudies X"
    assert sections.read_spec("- not a mapping") == {}


def test_metric_table_marks_metrics_that_do_not_apply(results_frame: pd.DataFrame) -> None:
    """A finished fit without the metric reads "—"; methods follow the given order."""
    frame = results_frame.assign(ksd=np.where(results_frame["method"] == "map", np.nan, 1.0))
    table = sections.metric_table(frame, ["ksd", "absent"], order=["sghmc", "laplace", "map"])
    assert list(pd.unique(table["method"])) == ["sghmc", "laplace", "map"]
    assert table.loc[table["method"] == "map", "ksd"].tolist() == ["—"]
    assert "absent" not in table.columns


def test_uncertainty_frame_stacks_in_and_out_of_distribution_points(results_frame: pd.DataFrame) -> None:
    """One row per point and fit, labelled by inputs; fits without OOD arrays are left out."""
    first, second = results_frame["cell"][:2]
    arrays = {
        first: {f"{prefix}uncertainty_{kind}": np.full(size, value)
                for prefix, size, value in (("", 3, 0.1), ("ood_", 2, 0.9))
                for kind in ("total", "aleatoric", "epistemic")},
        second: {"uncertainty_total": np.zeros(3)},
    }
    long = experiments.uncertainty_frame(results_frame, arrays)
    assert set(long["cell"]) == {first}
    by_run = experiments.uncertainty_frame(results_frame, {"run-0": arrays[first]}, key="run_id")
    assert len(by_run) == len(long)
    assert long.groupby("inputs")["total"].agg(list).to_dict() == {
        "in-distribution": [0.1] * 3, "out-of-distribution": [0.9] * 2
    }
    figure = experiments.uncertainty_distributions(long, order=["map"])
    assert [axis.get_title() for axis in figure.axes[:1]] == ["map"]


def test_uncertainty_frame_of_a_closed_form_predictive(results_frame: pd.DataFrame) -> None:
    """A `closed_form` fit logs TU only: its AU and EU rows are NaN, and the figure
    still draws."""
    first = results_frame["cell"].iloc[0]
    arrays = {first: {"uncertainty_total": np.full(3, 0.2), "ood_uncertainty_total": np.full(2, 0.6)}}
    long = experiments.uncertainty_frame(results_frame, arrays)
    assert len(long) == 5 and long["epistemic"].isna().all() and long["aleatoric"].isna().all()
    assert long["total"].tolist() == [0.2] * 3 + [0.6] * 2
    experiments.uncertainty_distributions(long, order=["map"])


def test_posterior_draws_of_every_form() -> None:
    """Samples are thinned, Gaussians sampled, a point estimate kept as its one vector."""
    samples = np.arange(20.0).reshape(10, 2)
    assert experiments.posterior_draws({"samples": samples}, count=5).shape == (5, 2)
    diagonal = experiments.posterior_draws({"mean": np.ones(2), "var": np.full(2, 4.0)}, 4000)
    assert np.allclose(diagonal.std(0), 2.0, atol=0.1)
    dense = experiments.posterior_draws({"mean": np.zeros(2), "cov": np.eye(2)}, 10)
    assert dense.shape == (10, 2)
    point = experiments.posterior_draws({"mean": np.ones(3), "var": np.zeros(3)})
    assert point.shape == (1, 3)


def test_coefficient_labels_use_feature_names() -> None:
    """A linear model's weights take the features' names; other tensors are indexed."""
    assert experiments.coefficient_labels(["weight", "bias"], ["1x2", "1"], ["age", "bmi"]) == [
        "age", "bmi", "bias"
    ]
    assert experiments.coefficient_labels(["0.weight"], ["2x1"]) == ["0.weight[0]", "0.weight[1]"]


def test_chain_states_split_contiguous_chains() -> None:
    """(K·S, d) with each chain contiguous becomes (K, S, d)."""
    samples = np.concatenate([np.zeros((3, 2)), np.ones((3, 2))])
    states = experiments.chain_states(samples, chains=2)
    assert states.shape == (2, 3, 2) and (states[1] == 1).all()


def test_difference_table_subtracts_the_first_run(results_frame: pd.DataFrame) -> None:
    """Each later run's mean over seeds minus the first run's, per method and temperature."""
    later = results_frame.assign(test_nll=results_frame["test_nll"] + 0.5)
    frame = compare.comparison_frame({"A": results_frame, "B": later})
    table = compare.difference_table(frame, ["test_nll"])
    assert np.allclose(table["Δ test_nll [B]"], 0.5)
    assert "test_nll [A]" in table.columns
    assert compare.comparison_metrics(frame)[:2] == ["test_nll", "test_accuracy"]


def test_spec_difference_is_a_unified_diff() -> None:
    """Changed lines show as - and +; equal specs give nothing."""
    difference = compare.spec_difference("a: 1\nb: 2\n", "a: 1\nb: 3\n", ("A", "B"))
    assert "-b: 2" in difference and "+b: 3" in difference
    assert compare.spec_difference("a: 1\n", "a: 1\n") == ""
