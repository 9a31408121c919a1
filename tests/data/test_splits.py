"""The data a run loads without importing scikit-learn: the digits read from its bundled
CSV, and train_test_split's rows remembered on disk (bayesflow.data.splits)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayesflow.data.dataset import split
from bayesflow.data.splits import split_folder, split_indices
from bayesflow.data.tabular import digits


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
def test_digits_are_load_digits_bit_for_bit() -> None:
    """The same file parsed by the same np.loadtxt: equal values, dtypes and shapes."""
    from sklearn.datasets import load_digits

    data, target = digits()
    bunch = load_digits()
    assert data.dtype == bunch.data.dtype and target.dtype == bunch.target.dtype
    # Exact: the same text parsed by the same function, no arithmetic, on any CPU.
    np.testing.assert_array_equal(data, bunch.data)
    np.testing.assert_array_equal(target, bunch.target)


@pytest.mark.parametrize("stratify", [True, False])
def test_a_split_is_train_test_split_bit_for_bit_computed_and_remembered(stratify: bool) -> None:
    """First computed, then read back: both equal to train_test_split on the arrays."""
    from sklearn.model_selection import train_test_split

    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(97, 4)), rng.integers(0, 3, size=97)
    expected = train_test_split(x, y, test_size=0.3, random_state=5, stratify=y if stratify else None)
    for _ in range(2):
        x_train, y_train, x_test, y_test = split(x, y, 0.3, 5, stratify, "test data")
        for got, want in zip((x_train, x_test, y_train, y_test), expected):
            # Exact: rows selected by the same integer indices, no arithmetic on the values.
            np.testing.assert_array_equal(got, want)
    assert len(list(split_folder().glob("*.npz"))) == 1


def test_a_damaged_remembered_split_is_computed_again() -> None:
    y = np.arange(20) % 2
    train, test = split_indices(y, 0.5, 0, True)
    [saved] = split_folder().glob("*.npz")
    saved.write_bytes(b"not a zip file")
    again = split_indices(y, 0.5, 0, True)
    # Integer row indices, recomputed by the same call.
    np.testing.assert_array_equal(again[0], train)
    np.testing.assert_array_equal(again[1], test)


def test_an_unwritable_cache_folder_still_splits(cache_home: Path) -> None:
    cache_home.parent.mkdir(parents=True, exist_ok=True)
    cache_home.write_text("a file where the folder would be")
    train, test = split_indices(np.arange(10) % 2, 0.5, 0, True)
    assert sorted([*train, *test]) == list(range(10))


@pytest.mark.slow
def test_loading_the_digits_a_second_time_imports_neither_sklearn_nor_torch(cache_home: Path) -> None:
    """A run whose stages are all cached loads the data for its digest only."""
    code = (
        "import sys; from bayesflow.data import load_dataset; "
        "load_dataset({'name': 'sklearn_digits'}); import bayesflow.evaluate.flags; "
        "print(sorted(name for name in ('sklearn', 'torch') if name in sys.modules))"
    )
    environment = {"XDG_CACHE_HOME": str(cache_home), "PATH": "/usr/bin:/bin",
                   "PYTHONPATH": str(Path(__file__).parents[2])}
    printed = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env=environment).stdout.strip()
        for _ in range(2)
    ]
    assert printed == ["['sklearn']", "[]"]
