"""The IMDB loader: tokeniser, vocabulary, padding, the three forms, the shipped subset."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesflow.data import DATASETS, load_dataset
from bayesflow.data.imdb import (
    OUT_OF_VOCABULARY,
    PADDING,
    build_vocabulary,
    encode,
    stratified_indices,
    tokenize,
)
from bayesflow.errors import MissingDependencyError, SpecError
from tests.data.conftest import TEST, TRAIN, frame

# The fixture's training words by frequency, ties alphabetical: bad and great (3 each),
# acting, boring, it (2 each), then the words seen once.
EXPECTED_IDS = {"bad": 2, "great": 3, "acting": 4, "boring": 5, "it": 6, "a": 7, "and": 8,
                "don't": 9, "film": 10, "loved": 11, "miss": 12, "plot": 13}


def load(path: Path | str, **options: object):
    """The imdb dataset of ``path`` with ``options``."""
    return load_dataset({"name": "imdb", "path": str(path), **options})


# ------------------------------------------------------------------------ text to ids


def test_tokenize_lowercases_and_strips_line_breaks() -> None:
    """Words are lower-cased, <br /> tags dropped, punctuation split off, apostrophes kept."""
    assert tokenize("A great, GREAT film.<br /><br />Loved it") == [
        "a", "great", "great", "film", "loved", "it"
    ]
    assert tokenize("Don't<br/>miss it!<BR>10/10") == ["don't", "miss", "it", "10", "10"]


def test_vocabulary_ranks_by_frequency_then_alphabet() -> None:
    """Ids start at 2 by falling frequency, ties broken alphabetically."""
    vocabulary = build_vocabulary([tokenize(text) for text, _, _ in TRAIN], 100)
    assert vocabulary == EXPECTED_IDS


def test_vocabulary_size_counts_the_reserved_ids() -> None:
    """vocab_size is the number of ids: padding, out-of-vocabulary and vocab_size − 2 words."""
    vocabulary = build_vocabulary([tokenize(text) for text, _, _ in TRAIN], 5)
    assert vocabulary == {"bad": 2, "great": 3, "acting": 4}


def test_encode_pads_and_truncates_at_the_front_by_default() -> None:
    """Keras' convention: a long review keeps its last ids, a short one is padded before."""
    vocabulary = {"a": 2, "b": 3, "c": 4}
    ids = encode([["a", "b", "c", "zzz"], ["b"]], vocabulary, 3)
    assert ids.dtype == np.int64
    assert ids.tolist() == [[3, 4, OUT_OF_VOCABULARY], [PADDING, PADDING, 3]]


def test_encode_post_padding_and_truncation() -> None:
    """`post` keeps a long review's first ids and pads a short one after its words."""
    vocabulary = {"a": 2, "b": 3, "c": 4}
    ids = encode([["a", "b", "c"], ["b"]], vocabulary, 2, padding="post", truncating="post")
    assert ids.tolist() == [[2, 3], [3, PADDING]]


def test_stratified_indices_keep_the_label_shares() -> None:
    """A balanced draw stays balanced, is sorted, and repeats with its seed."""
    labels = np.array([0] * 60 + [1] * 40)
    chosen = stratified_indices(labels, 10, seed=3)
    assert np.bincount(labels[chosen]).tolist() == [6, 4]
    assert chosen.tolist() == sorted(set(chosen.tolist()))
    assert chosen.tolist() == stratified_indices(labels, 10, seed=3).tolist()
    assert stratified_indices(labels, None, seed=3).tolist() == list(range(100))


# ---------------------------------------------------------------------------- the forms


def test_csv_form_builds_the_vocabulary_on_training_reviews_only(csv_folder: Path) -> None:
    """A word seen only in test reviews ("terrible", "superb") is out of vocabulary."""
    dataset = load(csv_folder, vocab_size=100, max_length=5)
    assert dataset.task == "classification" and dataset.num_classes == 2
    assert dataset.x_train.shape == (4, 5) and dataset.x_train.dtype == np.int64
    assert dataset.y_train.tolist() == [0, 0, 1, 1] and dataset.y_test.tolist() == [0, 1]
    bad, film, great, and_ = (EXPECTED_IDS[w] for w in ("bad", "film", "great", "and"))
    assert dataset.x_test.tolist() == [
        [PADDING, PADDING, OUT_OF_VOCABULARY, bad, film],
        [PADDING, PADDING, OUT_OF_VOCABULARY, and_, great],
    ]


def test_relative_path_is_taken_from_the_spec_folder(csv_folder: Path) -> None:
    """`path` relative to the spec's folder (base_dir), as for csv datasets."""
    config = {"name": "imdb", "path": csv_folder.name, "vocab_size": 100, "max_length": 5}
    dataset = load_dataset(config, base_dir=csv_folder.parent)
    assert dataset.x_train.shape == (4, 5)


def test_aclimdb_form_equals_the_csv_form(csv_folder: Path, aclimdb_folder: Path) -> None:
    """The archive's folder layout (its parent or aclImdb/ itself) gives the CSV form's arrays."""
    from_csv = load(csv_folder, vocab_size=100, max_length=6)
    for path in (aclimdb_folder, aclimdb_folder / "aclImdb"):
        dataset = load(path, vocab_size=100, max_length=6)
        assert dataset.digest == from_csv.digest


def test_review_files_are_read_in_numeric_id_order(tmp_path: Path) -> None:
    """aclImdb files sort by review id as a number: 2_7.txt before 10_8.txt."""
    for split in ("train", "test"):
        for kind in ("neg", "pos"):
            (tmp_path / split / kind).mkdir(parents=True)
        (tmp_path / split / "pos" / "10_8.txt").write_text("ten")
        (tmp_path / split / "pos" / "2_7.txt").write_text("two")
        (tmp_path / split / "neg" / "1_1.txt").write_text("one")
    dataset = load(tmp_path, vocab_size=10, max_length=1)
    ids = build_vocabulary([["one"], ["two"], ["ten"]], 10)
    assert dataset.x_train[:, 0].tolist() == [ids["one"], ids["two"], ids["ten"]]


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs `datasets`")
def test_huggingface_form_equals_the_csv_form(csv_folder: Path, tmp_path: Path) -> None:
    """A DatasetDict saved with save_to_disk gives the CSV form's arrays."""
    import datasets

    splits = {
        split: datasets.Dataset.from_pandas(frame(rows)[["text", "label"]])
        for split, rows in (("train", TRAIN), ("test", TEST))
    }
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "hf"))
    from_csv = load(csv_folder, vocab_size=100, max_length=6)
    assert load(tmp_path / "hf", vocab_size=100, max_length=6).digest == from_csv.digest


def test_huggingface_form_without_datasets_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the `datasets` package the error says how to install it."""
    (tmp_path / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError) as info:
        load(tmp_path)
    assert str(info.value) == (
        "data.source: huggingface needs the `datasets` package; install it with "
        "`pip install datasets`, or save the reviews as CSV (columns text, label)"
    )


def test_folder_without_imdb_data_says_what_it_expected(tmp_path: Path) -> None:
    """An empty folder: the message names the three forms and the shipped subset."""
    with pytest.raises(SpecError) as info:
        load(tmp_path)
    expected = (
        f"data.path: folder {str(tmp_path)!r} holds no IMDB data: expected imdb_train.csv.gz "
        "and imdb_test.csv.gz, the aclImdb layout (train/pos/*.txt, ...), or a Hugging Face "
        "DatasetDict saved with save_to_disk (dataset_dict.json); fix the path, or use "
        "`package:imdb` for the subset shipped with bayesflow"
    )
    assert info.value.problems == [expected]


def test_csv_without_a_label_column_is_refused(csv_folder: Path) -> None:
    """A CSV form file must have text and label columns."""
    text = frame(TRAIN).drop(columns=["label"]).to_csv(index=False).encode()
    (csv_folder / "imdb_train.csv.gz").write_bytes(gzip.compress(text))
    with pytest.raises(SpecError, match=r"imdb_train.csv.gz lacks the column\(s\) label"):
        load(csv_folder)


# ----------------------------------------------------------------- subsets and the digest


def test_max_train_and_max_test_draw_stratified_subsets(csv_folder: Path) -> None:
    """max_train=2, max_test=2 keep one review of each label per split."""
    dataset = load(csv_folder, max_train=2, max_test=2, vocab_size=100, max_length=4)
    assert dataset.y_train.tolist() == [0, 1] and dataset.y_test.tolist() == [0, 1]


def test_digest_covers_the_token_ids(csv_folder: Path) -> None:
    """Another vocabulary size or sequence length changes the ids, and so the digest."""
    digests = {
        load(csv_folder, vocab_size=100, max_length=5).digest,
        load(csv_folder, vocab_size=4, max_length=5).digest,
        load(csv_folder, vocab_size=100, max_length=6).digest,
    }
    assert len(digests) == 3


@pytest.mark.slow
def test_shipped_subset_loads_balanced() -> None:
    """package:imdb: 2,000 + 1,000 balanced reviews, ids below vocab_size, files under 2 MiB."""
    dataset = load("package:imdb", vocab_size=5_000)
    assert dataset.x_train.shape == (2_000, 100) and dataset.x_test.shape == (1_000, 100)
    assert np.bincount(dataset.y_train).tolist() == [1_000, 1_000]
    assert np.bincount(dataset.y_test).tolist() == [500, 500]
    assert 0 <= dataset.x_train.min() and dataset.x_test.max() < 5_000
    files = resources.files("bayesflow.data") / "files"
    sizes = [Path(str(files / f"imdb_{split}_subset.csv.gz")).stat().st_size for split in ("train", "test")]
    assert sum(sizes) < 2 * 2**20


def test_shipped_subset_has_the_csv_columns() -> None:
    """The subset files keep the full data's columns: text, label, rating, id."""
    file = Path(str(resources.files("bayesflow.data") / "files" / "imdb_test_subset.csv.gz"))
    assert list(pd.read_csv(file, nrows=1).columns) == ["text", "label", "rating", "id"]


def test_imdb_is_registered() -> None:
    """The registry lists imdb with its defaults."""
    parameters = DATASETS.entry("imdb").parameters()
    assert parameters["path"] == "package:imdb"
    assert parameters["vocab_size"] == 20_000 and parameters["max_length"] == 100
