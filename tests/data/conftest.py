"""Shared fixtures of the data tests: one torch thread, tiny IMDB folders in tmp_path."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.numerics import torch_threads

# Four training and two test reviews. "terrible" and "superb" appear only in test
# reviews, so a vocabulary built on the training split must map them to out-of-vocabulary.
# Negatives come first, as the aclImdb layout is read (neg, then pos, each by id).
TRAIN = [
    ("Bad plot. Bad acting.<br />Boring", 0, 2),
    ("Boring and bad", 0, 1),
    ("A great, GREAT film.<br /><br />Loved it", 1, 9),
    ("Great acting; don't miss it", 1, 8),
]
TEST = [
    ("Terrible, bad film", 0, 3),
    ("Superb and great", 1, 10),
]


def frame(rows: list[tuple[str, int, int]]) -> pd.DataFrame:
    """The CSV form's columns: text, label, rating, id."""
    return pd.DataFrame(
        [(text, label, rating, index) for index, (text, label, rating) in enumerate(rows)],
        columns=["text", "label", "rating", "id"],
    )


@pytest.fixture(autouse=True, scope="package")
def one_thread() -> Iterator[None]:
    """Run on one thread (``BAYESFLOW_TEST_THREADS`` overrides): these tiny tensors are
    several times slower on two busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads())
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def csv_folder(tmp_path: Path) -> Path:
    """The tiny reviews in the CSV form: imdb_train.csv.gz and imdb_test.csv.gz."""
    folder = tmp_path / "imdb_csv"
    folder.mkdir()
    for split, rows in (("train", TRAIN), ("test", TEST)):
        text = frame(rows).to_csv(index=False).encode()
        (folder / f"imdb_{split}.csv.gz").write_bytes(gzip.compress(text))
    return folder


@pytest.fixture
def aclimdb_folder(tmp_path: Path) -> Path:
    """The tiny reviews in the archive's layout: aclImdb/<split>/<pos|neg>/<id>_<rating>.txt."""
    root = tmp_path / "download" / "aclImdb"
    for split, rows in (("train", TRAIN), ("test", TEST)):
        for kind in ("pos", "neg"):
            (root / split / kind).mkdir(parents=True)
        for index, (text, label, rating) in enumerate(rows):
            kind = "pos" if label == 1 else "neg"
            (root / split / kind / f"{index}_{rating}.txt").write_text(text, encoding="utf-8")
    return tmp_path / "download"
