"""Byte-token windows of a corpus: their layout, the shipped IMDB reviews, bad files."""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from bayesflow.errors import DataError
from bayesflow.llm.text import (
    byte_encode,
    episode_windows,
    read_csv_column,
    read_text_files,
    token_windows,
)

IMDB = Path(str(resources.files("bayesflow.data") / "files" / "imdb_train_subset.csv.gz"))


def test_windows_stay_inside_documents_and_score_the_last_tokens() -> None:
    inputs, targets = token_windows(["abcdefg", "xyz", "0123"], length=4, stride=2, scored=2)
    decoded = [bytes(row.astype(np.uint8)).decode() for row in inputs]
    assert decoded == ["abcd", "cdef", "0123"]  # "xyz" is shorter than a window
    assert [bytes(row.astype(np.uint8)).decode() for row in targets] == ["cd", "ef", "23"]
    assert inputs.dtype == np.int64 and inputs.max() < 256


def test_utf8_is_encoded_byte_by_byte() -> None:
    assert byte_encode("é").tolist() == [0xC3, 0xA9]


def test_bad_sizes_and_short_corpora_are_refused() -> None:
    with pytest.raises(DataError, match="scored .4. must be at least 1 and below length .4."):
        token_windows(["abcdef"], 4, 1, 4)
    with pytest.raises(DataError, match="no document is 9 bytes long .the longest has 6."):
        token_windows(["abcdef"], 9, 1, 2)


def test_shipped_imdb_reviews_are_a_corpus() -> None:
    documents = read_csv_column(IMDB, "text")
    assert len(documents) > 1000
    inputs, targets = token_windows(documents[:20], length=64, stride=64, scored=8)
    assert inputs.shape[1] == 64 and targets.shape[1] == 8 and inputs.shape[0] > 20


def test_bad_files_are_data_errors(tmp_path) -> None:
    table = tmp_path / "t.csv.gz"
    table.write_bytes(gzip.compress(b"text,label\nhello,1\n"))
    with pytest.raises(DataError, match="has no column 'review'; its columns are: text, label"):
        read_csv_column(table, "review")
    empty, latin = tmp_path / "empty.txt", tmp_path / "latin.txt"
    empty.write_text("  \n")
    latin.write_bytes("café".encode("latin-1"))
    with pytest.raises(DataError, match="empty.txt' is empty"):
        read_text_files([empty])
    with pytest.raises(DataError, match=r"latin.txt' is not UTF-8 text \(byte 3"):
        read_text_files([latin])
    with pytest.raises(DataError, match="no file"):
        read_text_files([tmp_path / "absent.txt"])


def test_episodes_hold_out_the_end_of_every_document() -> None:
    documents = ["a" * 80 + "B" * 20, "c" * 60 + "D" * 40]
    episodes = episode_windows(documents, length=10, stride=10, scored=3, test_fraction=0.2)
    text = lambda rows: {bytes(r.astype(np.uint8)).decode() for r in rows}
    assert text(episodes.x_train[episodes.episode_train == 0]) == {"a" * 10}
    assert text(episodes.x_test[episodes.episode_test == 0]) == {"B" * 10}
    # document 1: 80 training bytes ("c" * 60 + "D" * 20), 20 test bytes
    assert text(episodes.x_test[episodes.episode_test == 1]) == {"D" * 10}
    assert (episodes.episode_train == 0).sum() == 8 and (episodes.episode_test == 1).sum() == 2
    np.testing.assert_array_equal(episodes.y_train, episodes.x_train[:, -3:])
    with pytest.raises(DataError, match="document 1 .20 tokens. gives no test window of 10 tokens"):
        episode_windows(["x" * 100, "y" * 20], 10, 5, 2, test_fraction=0.15)
    with pytest.raises(DataError, match="test_fraction: must lie in"):
        episode_windows(documents, 10, 5, 2, test_fraction=1.0)
