"""The report's evidence section: does a prior chosen by the evidence do what a cold
temperature does?

Every Laplace fit under a normal prior logs ``log_evidence``, the Laplace log marginal
likelihood of the untempered model (:mod:`bayesflow.engines.evidence`); a Laplace method
with ``prior_variance: auto`` also logs ``log_evidence_spec_prior``,
``prior_variance_chosen`` and, with ``noise_sd: auto``, ``noise_sd_chosen``. The table
here puts, per Laplace method, the evidence at the spec's prior, the chosen variance and
its evidence, next to the test NLL at T = 1 (the Bayes posterior of that prior) and at
the method's best temperature, chosen as the best-temperature table chooses it
(:func:`bayesflow.report.tables.best_temperatures`: on the validation NLL when the fits
logged one, else on the test NLL, an optimistic choice the table says it is). Method
names in the text are code spans (:func:`bayesflow.report.sections.code`); the table is
escaped when styled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesflow.report.sections import code
from bayesflow.report.tables import CHOSEN_ON, FINISHED, best_temperatures, selection_metric

__all__ = ["evidence_section", "evidence_table"]

SPEC_PRIOR = "log evidence, spec's prior"
CHOSEN_PRIOR = "log evidence, chosen prior"
VARIANCE = "chosen prior variance"
NOISE = "chosen noise sd"
AT_ONE = "test NLL at T = 1"
BEST_T = "best T"
AT_BEST = "test NLL at best T"


def _number(values: pd.Series, digits: str = ".3f") -> str:
    """Mean ± sd over the finite values (``—`` when none)."""
    numbers = pd.to_numeric(values, errors="coerce")
    numbers = numbers[np.isfinite(numbers)]
    if numbers.empty:
        return "—"
    if len(numbers) == 1:
        return format(numbers.iloc[0], digits)
    return f"{format(numbers.mean(), digits)} ± {format(numbers.std(ddof=1), digits)}"


def _variances(rows: pd.DataFrame) -> str:
    """The chosen prior variance (mean ± sd over seeds), or each tensor's mean for
    ``prior_variance: auto_per_tensor`` (``0.weight 0.25, 0.bias 0.31``)."""
    if "prior_variance_chosen" in rows.columns and rows["prior_variance_chosen"].notna().any():
        return _number(rows["prior_variance_chosen"], ".3g")
    prefix = "prior_variance_chosen/"
    tensors = [(column.removeprefix(prefix), pd.to_numeric(rows[column], errors="coerce").mean())
               for column in rows.columns if column.startswith(prefix)]
    return ", ".join(f"{name} {value:.3g}" for name, value in tensors if np.isfinite(value)) or "—"


def _laplace_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The finished rows of methods that logged an evidence."""
    if "log_evidence" not in frame.columns:
        return frame.iloc[:0]
    finished = frame.loc[frame["status"].astype(str) == FINISHED]
    logged = pd.to_numeric(finished["log_evidence"], errors="coerce").notna()
    methods = set(finished.loc[logged, "method"])
    return finished.loc[finished["method"].isin(methods)]


def _untempered(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of one seed's evidence: T = 1 where the grid has it (under the
    ``posterior`` convention every temperature logs the same number), else all."""
    at_one = rows.loc[np.isclose(pd.to_numeric(rows["temperature"], errors="coerce"), 1.0)]
    return at_one if not at_one.empty else rows


def evidence_table(frame: pd.DataFrame, metric: str = "test_nll") -> pd.DataFrame:
    """One row per Laplace method that logged an evidence (mean ± sd over seeds).

    Returns:
        Columns ``method``, ``prior`` (``spec`` or ``evidence``), :data:`SPEC_PRIOR`,
        :data:`VARIANCE`, :data:`NOISE` (when a fit chose one), :data:`CHOSEN_PRIOR`,
        :data:`AT_ONE`, :data:`BEST_T`, :data:`~bayesflow.report.tables.CHOSEN_ON`
        (``validation`` or ``test``: which rows chose the best temperature), :data:`AT_BEST`;
        empty without such methods.
    """
    rows = _laplace_rows(frame)
    noise = "noise_sd_chosen" in rows.columns and rows["noise_sd_chosen"].notna().any()
    columns = ["method", "prior", SPEC_PRIOR, VARIANCE, *([NOISE] if noise else []), CHOSEN_PRIOR,
               AT_ONE, BEST_T, CHOSEN_ON, AT_BEST]
    best = best_temperatures(rows, metric)
    table = []
    for method, group in rows.groupby("method", sort=False):
        untempered = _untempered(group)
        chosen = "log_evidence_spec_prior" in group.columns and group["log_evidence_spec_prior"].notna().any()
        row = {"method": method, "prior": "evidence" if chosen else "spec"}
        row[SPEC_PRIOR] = _number(untempered["log_evidence_spec_prior" if chosen else "log_evidence"])
        row[VARIANCE] = _variances(untempered) if chosen else "—"
        if noise:
            row[NOISE] = _number(untempered["noise_sd_chosen"], ".3g") if chosen else "—"
        row[CHOSEN_PRIOR] = _number(untempered["log_evidence"]) if chosen else "—"
        at_one = group.loc[np.isclose(pd.to_numeric(group["temperature"], errors="coerce"), 1.0)]
        row[AT_ONE] = _number(at_one[metric]) if metric in group.columns else "—"
        at, chosen, there = best.get(method, (None, metric, group.iloc[:0]))
        row[BEST_T] = "—" if at is None else f"{at:g}"
        row[CHOSEN_ON] = "—" if at is None else "validation" if chosen == selection_metric(metric) else "test"
        row[AT_BEST] = _number(there[metric]) if at is not None else "—"
        table.append(row)
    return pd.DataFrame(table, columns=columns)


def evidence_section(frame: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The section's text and :func:`evidence_table`; a sentence per evidence-chosen
    method comparing its T = 1 with the best temperature of the spec's prior (a Laplace
    of the same engine)."""
    table = evidence_table(frame)
    if table.empty:
        return ("_No Laplace fit logged an evidence (there is none, or the prior is not "
                "normal)._"), table
    text = (
        "The Laplace log marginal likelihood (evidence) of each Laplace method, of the "
        "untempered model (mean ± sd over seeds). A method with `prior_variance: auto` uses "
        "the prior variance (and, with `noise_sd: auto`, the noise) that maximises the "
        "evidence at its mode, found under the spec's prior; its T = 1 is the Bayes posterior "
        "under the chosen prior. If the cold posterior effect comes from a poor prior, the "
        "evidence-chosen posterior at T = 1 should predict about as well as the spec prior's "
        "best temperature. " + _chosen_on(table)
    )
    rows = _laplace_rows(frame)
    engines = rows.groupby("method", sort=False)["engine"].first()
    sentences = []
    for record in table.to_dict("records"):
        if record["prior"] != "evidence":
            continue
        peers = [peer for peer in table.to_dict("records")
                 if peer["prior"] == "spec" and engines.get(peer["method"]) == engines.get(record["method"])]
        for peer in peers:
            sentences.append(
                f"{code(record['method'])} at T = 1 (prior variance {record[VARIANCE]}): test NLL "
                f"{record[AT_ONE]}; {code(peer['method'])} (the spec's prior) at its best T = "
                f"{peer[BEST_T]} (chosen on {peer[CHOSEN_ON]}): {peer[AT_BEST]}, and at T = 1: "
                f"{peer[AT_ONE]}."
            )
    if sentences:
        text += "\n\n" + "\n".join(f"- {sentence}" for sentence in sentences)
    return text, table


def _chosen_on(table: pd.DataFrame) -> str:
    """The sentence saying which rows chose the best temperatures of ``table``."""
    on = set(table[CHOSEN_ON]) - {"—"}
    if on == {"validation"}:
        return ("The best temperature is the one of lowest mean **validation** NLL (rows held "
                "out of training, `val_nll`), as in the best-temperature table: the test rows "
                "took no part in the choice.")
    return ("The best temperature is the one of lowest mean NLL, as in the best-temperature "
            "table; `chosen on` says which rows chose it: where it reads *test*, it was chosen "
            "on the test NLL it reports, an optimistic number (set `data.validation_fraction` "
            "to choose on rows held out of training).")
