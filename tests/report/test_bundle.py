"""The report bundle: written from a results table and files, read back the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesflow.report import bundle

from .conftest import synthetic_results


def test_results_round_trip_with_their_types(tmp_path: Path) -> None:
    """The table comes back equal: floats with NaN, int seeds, bool and text columns."""
    frame = synthetic_results()
    data = bundle.open(bundle.write(tmp_path / "b", frame))
    pd.testing.assert_frame_equal(data.results(), frame)
    assert data.parent_run_ids == [] and data.prior_predictive() is None


def test_histories_are_long_and_keyed_by_cell(tmp_path: Path) -> None:
    """Values (steps 0, 1, ...) or (step, value) pairs both come back as a long table."""
    frame = synthetic_results()
    first, second = frame["cell"][:2]
    histories = {first: {"train_loss": [3.0, 2.0]}, second: {"train_loss": [(0, 1.0), (5, 0.5)]}}
    data = bundle.open(bundle.write(tmp_path / "b", frame, histories))
    long = data.histories("train_loss")
    assert list(long.columns) == ["method", "engine", "temperature", "seed", "cell", "step", "value"]
    assert long.loc[long["cell"] == second, "step"].tolist() == [0, 5]
    assert data.histories("trace/other").empty and data.history_keys() == ["train_loss"]


def test_arrays_are_linked_in_by_cell(tmp_path: Path) -> None:
    """Posterior and evaluation files come back as arrays by cell; a link, not a copy."""
    source = tmp_path / "posterior.npz"
    np.savez(source, mean=np.ones(3))
    check = tmp_path / "check.npz"
    np.savez(check, majority_fraction=np.zeros(2))
    frame = synthetic_results()
    cell = frame["cell"][0]
    folder = bundle.write(tmp_path / "b", frame, posteriors={cell: source}, prior_predictive=check,
                          about={"parent_run_ids": ["abc"]})
    data = bundle.open(folder)
    assert list(data.posteriors()) == [cell] and data.evaluations() == {}
    np.testing.assert_array_equal(data.posteriors()[cell]["mean"], np.ones(3))
    assert data.prior_predictive()["majority_fraction"].shape == (2,)
    assert data.parent_run_ids == ["abc"]
    (linked,) = (folder / "posteriors").iterdir()
    assert linked.stat().st_ino == source.stat().st_ino


def test_open_names_what_is_missing(tmp_path: Path) -> None:
    """A folder without a bundle is a clear error."""
    with pytest.raises(FileNotFoundError, match="holds no report bundle"):
        bundle.open(tmp_path)
