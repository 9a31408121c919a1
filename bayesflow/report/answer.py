"""The answer a report opens with: which method and temperature won, by how much, and
whether the runner-up can be told apart from it.

:func:`ranked` chooses each method's (and sweep variant's) temperature as the tables do
(:func:`bayesflow.report.tables.best_choices`: on the validation rows when the fits logged
them) and ranks the choices by the number that chose them. :func:`opening` writes the
answer as Markdown: the winner, its test metrics as mean ± sd over seeds, the runner-up
and the verdict of the t-test across seeds between the two
(:func:`bayesflow.evaluate.significance.compare`), with the p-value Holm-adjusted over
every pair of the ranked choices (the family of the "at each method's best temperature"
table of :mod:`bayesflow.report.differences`, so both say the same), or, when the gap is
not significant, how many seeds a study would need to tell them apart at the spread
observed (:func:`~bayesflow.evaluate.significance.seeds_to_detect`). A number a flag
concerns links to the flags table (:mod:`bayesflow.report.flags`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from bayesflow.evaluate.significance import ALPHA, POWER, Comparison, compare, holm, seeds_to_detect
from bayesflow.report.flags import anchor
from bayesflow.report.tables import (
    MARK,
    best_choices,
    flag_columns,
    flagged_rows,
    summary_metrics,
    temperature_independent,
)

__all__ = ["Choice", "compare_opening", "opening", "ranked", "verdict"]

NAMES = {
    "test_nll": "test NLL", "val_nll": "validation NLL", "test_accuracy": "accuracy",
    "test_rmse": "RMSE", "test_ece": "ECE", "test_brier": "Brier score",
    "test_perplexity": "perplexity", "ksd": "KSD",
    "total_variation": "total variation from the reference's predictive",
    "reference_variance_error": "error of the variances against the reference's",
    "ood_auroc_epistemic": "AUROC of the epistemic uncertainty",
    "statements_auroc_eu": "AUROC of the epistemic uncertainty",
}


@dataclass(frozen=True)
class Choice:
    """One method's (and variant's) best temperature and the fits there.

    Attributes:
        method: the method's name.
        variant: the sweep variant, or None in a plain study.
        temperature: the chosen temperature; None for a fit that does not depend on it.
        chosen: the column that chose it (``val_nll`` or the metric itself).
        rows: the finished fits at that temperature (one per seed).
    """

    method: str
    variant: str | None
    temperature: float | None
    chosen: str
    rows: pd.DataFrame
    run: str | None = None

    def label(self) -> str:
        """``method`` at its temperature (and its run, when compared across runs), as Markdown."""
        where = "T → 0 (its fit does not depend on T)" if self.temperature is None else f"T = {self.temperature:g}"
        variant = f" [{self.variant}]" if self.variant is not None else ""
        run = f"run {self.run}: " if self.run is not None else ""
        return f"{run}`{self.method}`{variant} at {where}"

    def values(self, metric: str) -> dict[int, float]:
        """seed → ``metric`` of the fits with a finite value."""
        numbers = pd.to_numeric(self.rows[metric], errors="coerce") if metric in self.rows else pd.Series(dtype=float)
        return {int(seed): float(value) for seed, value in zip(self.rows["seed"], numbers) if np.isfinite(value)}


def ranked(frame: pd.DataFrame, metric: str = "test_nll", *, higher: bool = False,
           exclude: tuple[str, ...] = ()) -> list[Choice]:
    """Every method's choice, best first: ranked by the mean of the column that chose the
    temperatures when every choice was made on it (validation), else by ``metric``.

    Args:
        frame: a results frame.
        metric: the test metric the answer is about.
        higher: a higher ``metric`` is better (an AUROC, an agreement).
        exclude: methods left out (a reference the others are scored against).
    """
    choices = []
    for key, best, chosen, rows in best_choices(frame, metric, higher):
        method = str(key[-1])
        if method in exclude or rows.empty:
            continue
        variant = str(key[0]) if len(key) > 1 else None
        free = temperature_independent(rows) or best is None
        choices.append(Choice(method, variant, None if free else best, chosen, rows))
    return _in_order(choices, metric, higher)


def _in_order(choices: list[Choice], metric: str, higher: bool) -> list[Choice]:
    """``choices`` best first, by the column that chose them all, else by ``metric``."""
    on = {choice.chosen for choice in choices}
    column = on.pop() if len(on) == 1 else metric
    sign = -1.0 if higher else 1.0

    def score(choice: Choice) -> float:
        values = list(choice.values(column).values())
        return sign * float(np.mean(values)) if values else math.inf

    return sorted(choices, key=score)


def _spread(values: dict[int, float]) -> str:
    numbers = list(values.values())
    if not numbers:
        return "—"
    if len(numbers) == 1:
        return f"{numbers[0]:.3f}"
    return f"{np.mean(numbers):.3f} ± {np.std(numbers, ddof=1):.3f}"


def _flag_links(choice: Choice, columns: list[str]) -> str:
    """Links to the flags of the choice's fits on ``columns`` (any column when empty)."""
    flagged = flag_columns(choice.rows)
    wanted = [c for c in (columns or list(flagged)) if c in flagged] or list(flagged)
    hits = [c for c in wanted if flagged_rows(choice.rows, [c]).any()]
    if choice.run is not None:  # a comparison has no flags table: run's own report has
        return f" {MARK} flagged ({', '.join(hits)}: see run {choice.run}'s report)" if hits else ""
    temperature = 0.0 if choice.temperature is None else choice.temperature
    return "".join(
        f' <a class="flag-link" href="#{anchor(choice.method, temperature, c, choice.variant)}">{MARK} flagged: {c}</a>'
        for c in hits
    )


def _temperatures(frame: pd.DataFrame, choice: Choice) -> int:
    """How many temperatures the choice's method (and run) was fitted at: 1 leaves nothing to choose."""
    rows = frame.loc[frame["method"].astype(str) == choice.method]
    if choice.run is not None and "run" in rows:
        rows = rows.loc[rows["run"].astype(str) == choice.run]
    return 1 if temperature_independent(rows) else int(rows["temperature"].nunique())


def _name(metric: str) -> str:
    return NAMES.get(metric, metric)


def verdict(choices: list[Choice], metric: str) -> tuple[Comparison, float]:
    """The test of the winner (``choices[0]``) against the runner-up on ``metric``
    across seeds, and its p-value Holm-adjusted over every pair of ``choices``."""
    tests = [compare(a.values(metric), b.values(metric)) for a, b in combinations(choices, 2)]
    adjusted = holm([test.p_value for test in tests])
    return tests[0], adjusted[0]


def _verdict_text(metric: str, choices: list[Choice]) -> str:
    result, adjusted = verdict(choices, metric)
    gap = abs(result.difference) if math.isfinite(result.difference) else math.nan
    name = _name(metric)
    seeds = result.seeds
    if result.note in ("no seed", "one seed"):
        return (f"With {seeds or 'no'} seed{'s' if seeds != 1 else ''} per cell no test across seeds is "
                f"possible: the gap of {gap:.3g} in {name} may be seed noise. Run at least three seeds "
                "(`seeds: [0, 1, 2]`) to tell them apart.")
    if result.note == "tie":
        return f"The two are equal at every one of {seeds} seeds: a tie."
    if result.note == "no spread":
        return (f"The gap, {gap:.3g} in {name}, is the same at every one of {seeds} seeds: no spread "
                "to test, the seeds do not change it.")
    family = len(choices) * (len(choices) - 1) // 2
    pairs = "pairs of methods" if choices[0].run is None else "pairs of runs"
    how = "paired by seed" if result.test == "paired" else "Welch's unpaired test"
    test = f"t-test over {seeds} seeds, {how}; p = {result.p_value:.2g}"
    if family > 1:
        test += f", {adjusted:.2g} after Holm's adjustment over the {family} {pairs}"
    if adjusted <= ALPHA:
        return f"The gap, {gap:.3g} in {name}, is **significant** ({test})."
    needed = seeds_to_detect(result)
    if needed is None:
        reach = "more seeds than a study would run would be needed to tell them apart at this spread"
    else:
        reach = (f"to tell them apart at this spread, a study would need about **{needed} seeds** "
                 f"(power {POWER:g} at α = {ALPHA:g}, one test); it ran {seeds}")
    return (f"The gap, {gap:.3g} in {name}, is **not significant** ({test}): only gaps above "
            f"{result.detectable:.3g} could be told apart with these seeds; {reach}.")


def opening(frame: pd.DataFrame, metric: str = "test_nll", *, higher: bool = False,
            exclude: tuple[str, ...] = (), question: str = "") -> str:
    """The report's answer as Markdown (module docstring).

    Args:
        frame: a results frame.
        metric: the test metric that answers the report's question.
        higher: a higher ``metric`` is better.
        exclude: methods that are not candidates (a reference).
        question: the question the report answers, said first when given.
    """
    choices = ranked(frame, metric, higher=higher, exclude=exclude)
    return _written(choices, frame, metric, higher, question)


def compare_opening(frames: dict[str, pd.DataFrame], metric: str = "test_nll", *, higher: bool = False) -> str:
    """The answer of a comparison of runs (``bayesflow report --compare``): each run's
    best method and temperature (:func:`ranked`), the best of them first with its test
    metrics, and the next run's best as the runner-up with the verdict of the t-test
    across seeds between the two (paired when both ran the same seeds: a seed fixes a
    fit's start whichever run it is in), Holm-adjusted over the pairs of runs."""
    bests = []
    for run, frame in frames.items():
        found = ranked(frame, metric, higher=higher)
        if found:
            best = found[0]
            bests.append(Choice(best.method, best.variant, best.temperature, best.chosen, best.rows, run))
    stacked = pd.concat([f.assign(run=run) for run, f in frames.items()], ignore_index=True) if frames else pd.DataFrame()
    bests = _in_order(bests, metric, higher)
    others = [f"run {choice.run}: {choice.label().split(': ', 1)[1]}" for choice in bests[2:]]
    text = _written(bests, stacked, metric, higher, "Each run's best method and temperature, the best run's first.",
                    noun="run")
    return text + (f"\n\nThe other runs' bests: {'; '.join(others)}." if others else "")


def _written(choices: list[Choice], frame: pd.DataFrame, metric: str, higher: bool, question: str,
             noun: str = "method") -> str:
    """The answer over ranked ``choices`` (module docstring) as Markdown."""
    lead = f"{question}\n\n" if question else ""
    if not choices:
        return lead + f"_No fit finished with a {_name(metric)}: there is no answer to give._"
    winner = choices[0]
    chosen_on = winner.chosen
    if chosen_on != metric:
        how = (f"chosen on the {_name(chosen_on)} (rows held out of training), so the test rows "
               "took no part in the choice")
    elif any(_temperatures(frame, choice) > 1 for choice in choices):
        how = (f"its temperature chosen on the {_name(metric)} it reports: optimistic "
               "(set `data.validation_fraction` to choose on rows held out of training)")
    else:
        how = f"ranked by {_name(metric)}"
    shown = [metric] + [m for m in summary_metrics(frame) if m != metric][:2]
    numbers = ", ".join(f"{_name(m)} {_spread(winner.values(m))}" for m in shown if winner.values(m))
    seeds = len(winner.values(metric))
    text = [
        f"**Best: {winner.label()}**, {how}. "
        f"Its {numbers} " + (f"(mean ± sd over {seeds} seeds)." if seeds > 1 else "(one seed).")
        + _flag_links(winner, shown)
    ]
    if len(choices) == 1:
        text.append(f"Only one {noun} has a finished fit: there is no runner-up to compare with.")
    else:
        second = choices[1]
        ahead = [np.mean(list(c.values(metric).values()) or [math.nan]) for c in (winner, second)]
        reversed_on_test = chosen_on != metric and (ahead[1] > ahead[0] if higher else ahead[1] < ahead[0])
        note = " (better on the test rows; the choice is the validation rows')" if reversed_on_test else ""
        text.append(
            f"**Runner-up: {second.label()}**, {_name(metric)} {_spread(second.values(metric))}{note}."
            + _flag_links(second, [metric]) + " " + _verdict_text(metric, choices)
        )
    others = len(choices) - 2
    if others > 0 and noun == "method":
        text.append(f"The {others} other method{'s' if others > 1 else ''} and the evidence follow.")
    return lead + "\n\n".join(text)

