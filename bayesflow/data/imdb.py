"""IMDB movie reviews (Maas et al., 2011) as padded sequences of token ids (torch-free).

The Large Movie Review Dataset: 25,000 training and 25,000 test reviews, each labelled
positive (1) or negative (0), the data of the cold-posterior CNN-LSTM experiments
(Wenzel et al., 2020; the posteriors paper, Section 5.1). Three forms are read, none
downloaded:

============  ============================================================================
source        ``path`` is a folder holding
============  ============================================================================
csv           ``imdb_train.csv.gz`` and ``imdb_test.csv.gz`` (or ``.csv``, or the shipped
              ``imdb_*_subset.csv.gz``), columns ``text`` and ``label`` (``rating`` and
              ``id`` may follow and are ignored)
aclimdb       the archive's layout, ``train/pos/*.txt``, ``train/neg/*.txt``, ``test/...``
              (the ``aclImdb`` folder itself or its parent)
huggingface   a ``datasets.DatasetDict`` with ``train`` and ``test`` splits saved by
              ``save_to_disk`` (needs the ``datasets`` package)
============  ============================================================================

``path: package:imdb`` is the stratified subset shipped with bayesflow: 2,000 training
and 1,000 test reviews, balanced, each cut to its last 1,200 characters (see
``scripts/make_imdb_subset.py``).

Text becomes ids by :func:`tokenize` (lower case, ``<br />`` removed, runs of letters
and digits with an optional apostrophe suffix) and a vocabulary of the most frequent
words of the training reviews only (:func:`build_vocabulary`): id 0 pads, id 1 stands for
every word outside the vocabulary. :func:`encode` truncates and pads every review to
``max_length`` ids, by default at the front as Keras' ``pad_sequences`` does, which is
how Wenzel et al. and the posteriors IMDB example prepared the data: the last 100 tokens
are kept and the LSTM reads the end of the review last.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from bayesflow.data.dataset import DATASETS, Dataset, resolve_path, validation_rows
from bayesflow.data.sniff import check_text, excerpt, names
from bayesflow.errors import DataError, MissingDependencyError, SpecError

__all__ = [
    "OUT_OF_VOCABULARY",
    "PADDING",
    "Reviews",
    "build_vocabulary",
    "encode",
    "imdb",
    "read_reviews",
    "stratified_indices",
    "tokenize",
]

PADDING = 0
OUT_OF_VOCABULARY = 1
RESERVED_IDS = 2
SPLITS = ("train", "test")
SOURCES = ("csv", "aclimdb", "huggingface")
PACKAGE_PATH = "package:imdb"
CSV_EXPECTED = "a UTF-8 CSV file (optionally gzip-compressed) with columns text and label"

# IMDB reviews mark line breaks with HTML <br /> tags (Maas et al.'s files); a word is a
# run of letters or digits (any script), with an apostrophe suffix kept ("don't", "it's").
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


@dataclass(frozen=True)
class Reviews:
    """The raw texts and 0/1 labels of one split."""

    texts: list[str]
    labels: np.ndarray

    def take(self, indices: np.ndarray) -> Reviews:
        """The reviews at ``indices``, in that order."""
        return Reviews([self.texts[i] for i in indices], self.labels[indices])


# ------------------------------------------------------------------------ text to ids


def tokenize(text: str) -> list[str]:
    """Lower-case words of a review, with its ``<br />`` tags removed."""
    return WORD.findall(LINE_BREAK.sub(" ", text).lower())


def build_vocabulary(tokenized: Iterable[Sequence[str]], vocab_size: int) -> dict[str, int]:
    """Word → id for the ``vocab_size − 2`` most frequent words (ids 2, 3, ...).

    Ties in frequency are broken alphabetically, so the vocabulary is a function of the
    texts alone. Ids 0 (padding) and 1 (out of vocabulary) are reserved.

    Args:
        tokenized: the tokens of every training review (never the test reviews).
        vocab_size: the number of ids, reserved ones included (at least 3).
    """
    counts = Counter(word for tokens in tokenized for word in tokens)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [word for word, _ in ranked[: vocab_size - RESERVED_IDS]]
    return {word: index for index, word in enumerate(words, start=RESERVED_IDS)}


def encode(
    tokenized: Iterable[Sequence[str]],
    vocabulary: dict[str, int],
    max_length: int,
    padding: str = "pre",
    truncating: str = "pre",
) -> np.ndarray:
    """Token lists to an int64 array (n, max_length) of ids, truncated and padded.

    Args:
        tokenized: the tokens of each review.
        vocabulary: word → id from :func:`build_vocabulary`; other words become id 1.
        max_length: ids per review.
        padding: ``"pre"`` puts the padding ids (0) before a short review, ``"post"``
            after it.
        truncating: ``"pre"`` drops the first tokens of a long review (keeping its end),
            ``"post"`` its last ones; Keras' ``pad_sequences`` defaults are ``"pre"``
            for both.
    """
    rows = []
    for tokens in tokenized:
        kept = tokens[-max_length:] if truncating == "pre" else tokens[:max_length]
        ids = [vocabulary.get(word, OUT_OF_VOCABULARY) for word in kept]
        fill = [PADDING] * (max_length - len(ids))
        rows.append(fill + ids if padding == "pre" else ids + fill)
    return np.array(rows, dtype=np.int64).reshape(-1, max_length)


def stratified_indices(labels: np.ndarray, size: int | None, seed: int) -> np.ndarray:
    """Sorted indices of ``size`` items drawn without replacement, stratified by label.

    Each class gets its share of ``size`` (largest remainders round), so a balanced
    split stays balanced. ``None`` or a size of at least ``len(labels)`` keeps everything.
    """
    if size is None or size >= len(labels):
        return np.arange(len(labels))
    generator = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quotas = counts * size / len(labels)
    take = np.floor(quotas).astype(int)
    largest_remainders = np.argsort(-(quotas - take), kind="stable")
    take[largest_remainders[: size - int(take.sum())]] += 1
    chosen = [
        generator.choice(np.flatnonzero(labels == label), count, replace=False)
        for label, count in zip(classes, take)
    ]
    return np.sort(np.concatenate(chosen))


# ---------------------------------------------------------------------- the three forms


def _csv_file(folder: Path, split: str) -> Path | None:
    for name in (f"imdb_{split}.csv.gz", f"imdb_{split}.csv", f"imdb_{split}_subset.csv.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _aclimdb_root(folder: Path) -> Path | None:
    for root in (folder, folder / "aclImdb"):
        if (root / "train" / "pos").is_dir():
            return root
    return None


def detect_source(folder: Path) -> str:
    """Which form the folder holds: ``csv``, ``aclimdb`` or ``huggingface``.

    Raises:
        SpecError: when it holds none of them.
    """
    if _csv_file(folder, "train") is not None:
        return "csv"
    if _aclimdb_root(folder) is not None:
        return "aclimdb"
    if (folder / "dataset_dict.json").is_file():
        return "huggingface"
    raise SpecError(
        f"data.path: folder {str(folder)!r} holds no IMDB data: expected imdb_train.csv.gz "
        "and imdb_test.csv.gz, the aclImdb layout (train/pos/*.txt, ...), or a Hugging Face "
        "DatasetDict saved with save_to_disk (dataset_dict.json); fix the path, or use "
        f"`{PACKAGE_PATH}` for the subset shipped with bayesflow"
    )


def read_csv_split(folder: Path, split: str) -> Reviews:
    """One split of the CSV form (columns ``text`` and ``label``)."""
    import pandas as pd

    file = _csv_file(folder, split)
    if file is None:
        raise SpecError(
            f"data.path: folder {str(folder)!r} has no imdb_{split}.csv.gz (nor .csv); "
            "the csv form needs imdb_train.csv.gz and imdb_test.csv.gz"
        )
    check_text(file, CSV_EXPECTED)
    try:
        frame = pd.read_csv(file, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as error:
        raise DataError(
            f"data.path: {file.name} cannot be read as CSV ({excerpt(str(error).strip(), 120)}); "
            f"expected {CSV_EXPECTED}", str(file),
        ) from None
    missing = [column for column in ("text", "label") if column not in frame.columns]
    if missing:
        raise SpecError(
            f"data.path: {file.name} lacks the column(s) {', '.join(missing)} "
            f"(columns: {names(frame.columns)}); expected text and label"
        )
    return Reviews(frame["text"].astype(str).tolist(), _labels(frame["label"].to_numpy(), file.name))


def read_aclimdb_split(folder: Path, split: str) -> Reviews:
    """One split of the archive's layout: ``<split>/neg/<id>_<rating>.txt``, then ``pos``."""
    root = _aclimdb_root(folder) or folder
    texts: list[str] = []
    labels: list[int] = []
    for label, kind in ((0, "neg"), (1, "pos")):
        directory = root / split / kind
        if not directory.is_dir():
            raise SpecError(
                f"data.path: {str(directory)!r} does not exist; the aclImdb layout needs "
                f"{split}/neg and {split}/pos folders of .txt reviews"
            )
        files = sorted(directory.glob("*.txt"), key=lambda file: _review_number(file.stem))
        texts += [_review_text(file) for file in files]
        labels += [label] * len(files)
    return Reviews(texts, np.array(labels, dtype=np.int64))


def _review_text(file: Path) -> str:
    """One review of the archive's layout, refused unless it is UTF-8 text."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"data.path: {file.name} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at "
            f"offset {error.start}); the aclImdb layout holds one UTF-8 review per .txt file", str(file),
        ) from None
    if "\x00" in text:
        raise DataError(
            f"data.path: {file.name} is not text: it holds NUL bytes; the aclImdb layout holds "
            "one UTF-8 review per .txt file", str(file),
        )
    return text


def _review_number(stem: str) -> tuple[int, str]:
    """Sort key of ``<id>_<rating>``: the id as a number, so 10_1 follows 9_3."""
    head = stem.split("_", 1)[0]
    return (int(head), stem) if head.isdigit() else (-1, stem)


def read_huggingface_split(folder: Path, split: str) -> Reviews:
    """One split of a ``datasets.DatasetDict`` saved with ``save_to_disk``."""
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            "data.source: huggingface needs the `datasets` package; install it with "
            "`pip install datasets`, or save the reviews as CSV (columns text, label)"
        ) from exc
    saved = datasets.load_from_disk(str(folder))
    splits = list(saved.keys()) if isinstance(saved, datasets.DatasetDict) else []
    if split not in splits:
        raise SpecError(
            f"data.path: the Hugging Face copy at {str(folder)!r} has no {split!r} split "
            f"(splits: {', '.join(splits) or 'none, it is a single Dataset'}); save a "
            "DatasetDict with train and test splits"
        )
    table = saved[split]
    missing = [column for column in ("text", "label") if column not in table.column_names]
    if missing:
        raise SpecError(
            f"data.path: the {split!r} split lacks the column(s) {', '.join(missing)} "
            f"(columns: {', '.join(table.column_names)}); expected text and label"
        )
    return Reviews(
        [str(text) for text in table["text"]],
        _labels(np.asarray(list(table["label"])), f"the {split!r} split"),
    )


def _labels(values: np.ndarray, where: str) -> np.ndarray:
    unexpected = sorted(set(np.unique(values).tolist()) - {0, 1})
    if unexpected:
        raise SpecError(
            f"data.path: the labels of {where} must be 0 (negative) or 1 (positive), "
            f"got {', '.join(map(str, unexpected[:5]))}"
        )
    return values.astype(np.int64)


READERS = {"csv": read_csv_split, "aclimdb": read_aclimdb_split, "huggingface": read_huggingface_split}


def resolve_folder(path: str, base_dir: Path | None = None) -> Path:
    """The folder a spec's ``data.path`` names (``package:imdb``: the shipped subset)."""
    if path == PACKAGE_PATH:
        return Path(str(resources.files("bayesflow.data") / "files"))
    if path.startswith("package:"):
        raise SpecError(f"data.path: {path!r} is not shipped; the one IMDB package path is {PACKAGE_PATH!r}")
    folder = resolve_path(path, base_dir)
    if not folder.is_dir():
        raise SpecError(
            f"data.path: {str(folder)!r} is not a folder; give the folder holding the IMDB "
            f"data (imdb_train.csv.gz and imdb_test.csv.gz, aclImdb/, or a saved DatasetDict)"
        )
    return folder


def read_reviews(path: str, source: str = "auto", base_dir: Path | None = None) -> dict[str, Reviews]:
    """The ``train`` and ``test`` reviews of the folder ``path`` names, in form ``source``."""
    folder = resolve_folder(path, base_dir)
    form = detect_source(folder) if source == "auto" else source
    if form not in READERS:
        raise SpecError(f"data.source: expected auto or one of {', '.join(SOURCES)}, got {source!r}")
    return {split: READERS[form](folder, split) for split in SPLITS}


# -------------------------------------------------------------------------- the dataset


@DATASETS.register("imdb", "IMDB movie reviews as padded token ids (Maas et al., 2011)")
def imdb(
    path: str = PACKAGE_PATH,
    source: str = "auto",
    vocab_size: int = 20_000,
    max_length: int = 100,
    max_train: int | None = None,
    max_test: int | None = None,
    subset_seed: int = 0,
    padding: str = "pre",
    truncating: str = "pre",
    base_dir: Path | None = None,
    validation_fraction: float = 0.0,
    split_seed: int = 0,
) -> Dataset:
    """IMDB reviews as int64 token ids (n, max_length), labels 1 positive and 0 negative.

    The vocabulary comes from the training reviews kept (after ``max_train``, less the
    ``validation_fraction`` held out for validation, stratified, drawn from
    ``split_seed``) only, so a word seen only in test or validation reviews is out of
    vocabulary (id 1).

    Args:
        path: a folder in one of the three forms, or ``package:imdb``.
        source: ``auto`` (detect), ``csv``, ``aclimdb`` or ``huggingface``.
        vocab_size: ids in all, 0 (padding) and 1 (out of vocabulary) included.
        max_length: ids per review.
        max_train: keep this many training reviews, stratified by label; None keeps all.
        max_test: the same for the test reviews.
        subset_seed: seed of the ``max_train`` / ``max_test`` draws.
        padding: ``pre`` or ``post`` (see :func:`encode`).
        truncating: ``pre`` or ``post`` (see :func:`encode`).
        base_dir: the spec's folder, which a relative ``path`` is taken from.
        validation_fraction: share of the training reviews kept held out for validation.
        split_seed: seed of that draw.
    """
    reviews = read_reviews(path, source, base_dir)
    train = reviews["train"].take(stratified_indices(reviews["train"].labels, max_train, subset_seed))
    test = reviews["test"].take(stratified_indices(reviews["test"].labels, max_test, subset_seed))
    validation = None
    if validation_fraction:
        where = f"the IMDB reviews of {resolve_folder(path, base_dir)}"
        kept, held = validation_rows(train.labels, validation_fraction, split_seed, True, where)
        train, validation = train.take(kept), train.take(held)
    train_tokens = [tokenize(text) for text in train.texts]
    vocabulary = build_vocabulary(train_tokens, vocab_size)

    def ids(tokenized: list[list[str]]) -> np.ndarray:
        return encode(tokenized, vocabulary, max_length, padding, truncating)

    return Dataset(
        ids(train_tokens), train.labels, ids([tokenize(text) for text in test.texts]), test.labels,
        "classification", num_classes=2, source=str(resolve_folder(path, base_dir)),
        target="the review labels",
        x_validation=None if validation is None else ids([tokenize(text) for text in validation.texts]),
        y_validation=None if validation is None else validation.labels,
    )
