"""The report's section on agreement with `evaluate.reference`: the scores as mean ± sd
over seeds, the reference's own rows marked, nothing without a reference."""

from __future__ import annotations

import pandas as pd

from bayesflow.report import sections

from .conftest import synthetic_results


def scored() -> pd.DataFrame:
    """The synthetic frame with Laplace scored against SGHMC at each temperature (seed 1's
    total variation 0.02 above seed 0's); SGHMC, the reference, and MAP unscored."""
    frame = synthetic_results()
    laplace = frame["method"] == "laplace"
    frame["agreement"] = float("nan")
    frame["total_variation"] = float("nan")
    frame.loc[laplace, "agreement"] = 0.95
    frame.loc[laplace, "total_variation"] = 0.03 + 0.02 * frame.loc[laplace, "seed"]
    frame.loc[frame["status"] != "FINISHED", ["agreement", "total_variation"]] = float("nan")
    return frame


def test_the_scores_and_the_marked_reference() -> None:
    """Laplace's rows hold mean ± sd; SGHMC's read "reference"; MAP, fitted once for every
    temperature and so not compared, reads "—"; the text names the reference."""
    spec = {"evaluate": {"reference": {"method": "sghmc"}}}
    text, table = sections.reference_agreement(scored(), spec, ["map", "laplace", "sghmc"])
    assert "`sghmc` at the same temperature" in text and "agreement" in text
    assert list(table["method"].unique()) == ["map", "laplace", "sghmc"]
    rows = table.set_index(["method", "temperature"])
    assert rows.loc[("laplace", 1.0), "total_variation"] == "0.040 ± 0.014"
    assert rows.loc[("laplace", 1.0), "agreement"] == "0.950 ± 0.000"
    assert (table.loc[table["method"] == "sghmc", ["agreement", "total_variation"]] == "reference").all().all()
    assert rows.loc[("map", 0.0), "agreement"] == "—"


def test_a_stated_temperature_marks_only_that_row() -> None:
    """With `temperature: 1` only SGHMC at T = 1 is the reference; the shorthand
    `reference: sghmc` names the method too."""
    spec = {"evaluate": {"reference": {"method": "sghmc", "temperature": 1.0}}}
    text, table = sections.reference_agreement(scored(), spec)
    assert "at T = 1" in text
    marked = table.loc[table["agreement"] == "reference", ["method", "temperature"]]
    assert marked.values.tolist() == [["sghmc", 1.0]]
    assert sections.reference_method({"evaluate": {"reference": "sghmc"}}) == "sghmc"
    assert sections.reference_method({"evaluate": {"reference": {"file": "p.csv"}}}) is None


def test_nothing_without_a_reference_or_scores() -> None:
    """No `evaluate.reference`, or no fit scored: empty text and table."""
    text, table = sections.reference_agreement(scored(), {})
    assert text == "" and table.empty
    text, table = sections.reference_agreement(synthetic_results(), {"evaluate": {"reference": "sghmc"}})
    assert text == "" and table.empty


def test_a_reference_file_is_named() -> None:
    """A file reference: the text names the file and no row is marked."""
    spec = {"evaluate": {"reference": {"file": "probs.csv"}}}
    text, table = sections.reference_agreement(scored(), spec)
    assert "`probs.csv`" in text and not (table["agreement"] == "reference").any()
