"""The cold-chains benchmark (benchmarks/studies/cold_chains.py) on a few epochs: every field the
doc's table reads is there and sane, and the table lands between the page's markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.studies import cold_chains

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    variants = {
        "tiny_default": {"epochs": 6, "burn_in": 30, "thin": 5},
        "tiny_remedy": {"epochs": 6, "burn_in": 30, "thin": 5, "discretisation": "matched",
                        "gradient_noise": "estimated"},
    }
    saved = dict(cold_chains.VARIANTS)
    cold_chains.VARIANTS.update(variants)
    try:
        return [cold_chains.measure(name, 1.0, 0) for name in variants]
    finally:
        cold_chains.VARIANTS.clear()
        cold_chains.VARIANTS.update(saved)


def test_rows_hold_the_measurements(rows: list[dict]) -> None:
    """Kinetic and configurational ratios, band shares, predictive scores and step times;
    the friction record only where the noise is estimated."""
    default, remedy = rows
    for row in rows:
        assert 0.5 < row["kinetic_ratio_mean"] < 2
        assert 0 <= row["fraction_in_band"] <= 1
        assert set(row["band"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
        assert 0 < row["test_nll"] and 0 < row["test_accuracy"] <= 1
        assert row["seconds_per_step"] > 0 and row["steps"] == 6 * 29
    # The default records every 5th step after burn-in and every epoch's end; the engine of
    # the estimate steps a whole epoch per update, so its records are the epochs' ends.
    assert default["kept_records"] == (6 * 29 - 30) // 5
    assert remedy["kept_records"] == 5
    assert default["raised_friction"] == {}
    assert set(remedy["raised_friction"]) >= {"raised", "capped_hot", "lr_limit_all"}


def test_render_replaces_the_block(rows: list[dict], tmp_path: Path) -> None:
    """The table goes between the markers and the rest of the page stays."""
    page = tmp_path / "page.md"
    page.write_text(f"before\n{cold_chains.BEGIN}\nPLACEHOLDER\n{cold_chains.END}\nafter\n")
    results = {
        "date": "2026-01-01", "time": "00:00 UTC", "rows": rows, "cost": None,
        "settings": {"mode": "full", "seeds": [0]},
        "machine": {"bayesflow_revision": "abc", "cpu": "cpu", "cores": 2,
                    "load_average": [1.0], "versions": {"torch": "2"}, "threads": 1},
    }
    cold_chains.replace_block(page, cold_chains.render(results, tmp_path / "r.json"))
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "PLACEHOLDER" not in text
    assert "| tiny_remedy | 1 |" in text
