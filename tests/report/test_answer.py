"""The answer a report opens with: the winner chosen on validation, its test numbers,
the runner-up and the verdict across seeds; the same for a comparison of runs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from bayesflow.report import answer, differences

from .conftest import synthetic_results
from .frames import with_flags


def validated(noise: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """The synthetic frame's finished fits with seed noise on the test NLL and a
    validation NLL beside it, over four seeds."""
    rng = np.random.default_rng(seed)
    base = synthetic_results()
    base = base.loc[base["status"] == "FINISHED"]
    frames = [base.assign(seed=base["seed"] + 2 * copy) for copy in range(2)]
    frame = pd.concat(frames, ignore_index=True)
    frame["test_nll"] = frame["test_nll"] + rng.normal(0.0, noise, len(frame))
    frame["val_nll"] = frame["test_nll"] + rng.normal(0.0, noise / 2, len(frame))
    return frame


def test_the_winner_is_chosen_on_validation_and_named_with_its_test_numbers() -> None:
    """Best: the lowest mean validation NLL; its test NLL and accuracy as mean ± sd."""
    frame = validated()
    choices = answer.ranked(frame)
    means = {c.method: np.mean(list(c.values("val_nll").values())) for c in choices}
    assert choices[0].method == min(means, key=means.__getitem__)
    text = answer.opening(frame)
    first = choices[0]
    nll = list(first.values("test_nll").values())
    assert text.startswith(f"**Best: {first.label()}**, chosen on the validation NLL")
    assert f"test NLL {np.mean(nll):.3f} ± {np.std(nll, ddof=1):.3f}" in text
    assert "accuracy" in text and "(mean ± sd over 4 seeds)" in text
    assert f"**Runner-up: {choices[1].label()}**" in text


def test_the_verdict_agrees_with_the_differences_table_at_best_temperatures() -> None:
    """The answer's Holm-adjusted p of winner against runner-up is the at-best table's."""
    frame = validated()
    choices = answer.ranked(frame)
    _, adjusted = answer.verdict(choices, "test_nll")
    table = differences.pairs_at_best(frame, "test_nll")
    pair = {choices[0].method, choices[1].method}
    (row,) = [r for r in table.to_dict("records") if {r["method A"], r["method B"]} == pair]
    assert row["p (Holm)"] == f"{adjusted:.3g}"
    text = answer.opening(frame)
    verdict = "**significant**" if adjusted <= 0.05 else "**not significant**"
    assert verdict in text and f"{adjusted:.2g} after Holm's adjustment over the 3 pairs" in text


def test_a_gap_within_the_noise_says_how_many_seeds_would_tell() -> None:
    """Not significant: the detectable gap and the seeds a study would need are given."""
    frame = validated(noise=0.05, seed=3)
    text = answer.opening(frame)
    assert "**not significant**" in text
    found = re.search(r"a study would need about \*\*(\d+) seeds\*\*", text)
    assert found and int(found.group(1)) > 4, text


def test_one_seed_asks_for_more_seeds() -> None:
    """With one seed per cell no test is possible, and the answer says what to run."""
    frame = synthetic_results()
    text = answer.opening(frame.loc[frame["seed"] == 0])
    assert "no test across seeds is possible" in text and "`seeds: [0, 1, 2]`" in text


def test_a_choice_on_the_test_rows_is_called_optimistic() -> None:
    """Without validation metrics the answer says the temperature was chosen on test."""
    assert "optimistic" in answer.opening(synthetic_results())


def test_a_higher_is_better_metric_and_an_excluded_reference() -> None:
    """An AUROC picks the highest; a reference method is no candidate."""
    frame = validated().assign(score=lambda f: -f["test_nll"])
    best = answer.ranked(frame.drop(columns="val_nll"), "score", higher=True)[0]
    assert best.method == answer.ranked(frame.drop(columns="val_nll"), "test_nll")[0].method
    excluded = answer.ranked(frame, "test_nll", exclude=(best.method,))
    assert best.method not in {choice.method for choice in excluded}


def test_a_flagged_winner_links_to_its_flag() -> None:
    """A flag on the winner's fits is a link to its row of the flags table."""
    frame = with_flags()
    frame["flag/test_nll"] = ""
    frame.loc[frame["method"] == "map", "flag/test_nll"] = "odd"
    text = answer.opening(frame)
    assert text.startswith("**Best: `map`")
    assert '<a class="flag-link" href="#flag-map-T0--test_nll">' in text


def test_the_comparison_of_runs_names_the_best_run_and_the_verdict() -> None:
    """Run B's NLL is 0.02 lower at every fit: it wins, run A's best is the runner-up."""
    first = validated()
    second = first.assign(test_nll=first["test_nll"] - 0.02, val_nll=first["val_nll"] - 0.02)
    text = answer.compare_opening({"A": first, "B": second})
    assert "**Best: run B: `" in text and "**Runner-up: run A: `" in text
    assert "0.02 in test NLL" in text and "seeds" in text
