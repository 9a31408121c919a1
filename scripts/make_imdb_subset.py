"""Make the small IMDB subset shipped with bayesflow (``data.path: package:imdb``).

Draws 2,000 training and 1,000 test reviews from the full CSV form of the Large Movie
Review Dataset (Maas et al., 2011), balanced between positive and negative, with a fixed
seed, and writes them with the same columns (``text``, ``label``, ``rating``, ``id``) to
``bayesflow/data/files/imdb_{train,test}_subset.csv.gz``.

Each review is cut to its last 1,200 characters (starting at a word boundary) to keep
the two files near 1 MiB: the loader keeps the last ``max_length`` tokens of a review
(100 by default, as Keras' ``pad_sequences`` and the papers' code), and the script checks
that every cut review still gives exactly the same last 100 tokens as the full one. The
vocabulary built from the cut reviews can differ from the uncut ones' in its rarest words.

    python scripts/make_imdb_subset.py                      # reads ../shared/data
    python scripts/make_imdb_subset.py --source /data/imdb  # another folder

The output is byte-for-byte reproducible (fixed seed, gzip timestamp 0).
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import pandas as pd

from bayesflow.data.imdb import stratified_indices, tokenize

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"train": 2_000, "test": 1_000}
SEED = 0
KEEP_CHARACTERS = 1_200
CHECKED_TOKENS = 100


def cut(text: str, characters: int = KEEP_CHARACTERS) -> str:
    """The last ``characters`` of ``text`` or fewer, starting after a whitespace."""
    if len(text) <= characters:
        return text
    tail = text[-characters:]
    space = next((index for index, char in enumerate(tail) if char.isspace()), None)
    return tail if space is None else tail[space + 1 :]


def subset(frame: pd.DataFrame, size: int) -> pd.DataFrame:
    """``size`` rows stratified by label (sorted as in the source), texts cut."""
    rows = frame.iloc[stratified_indices(frame["label"].to_numpy(), size, SEED)].copy()
    full = rows["text"].tolist()
    rows["text"] = [cut(text) for text in full]
    changed = sum(
        tokenize(short)[-CHECKED_TOKENS:] != tokenize(text)[-CHECKED_TOKENS:]
        for short, text in zip(rows["text"], full)
    )
    if changed:
        raise SystemExit(f"{changed} cut reviews lost some of their last {CHECKED_TOKENS} tokens")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder holding imdb_train.csv.gz and imdb_test.csv.gz")
    parser.add_argument("--output", type=Path, default=ROOT / "bayesflow" / "data" / "files")
    arguments = parser.parse_args()
    for split, size in SIZES.items():
        frame = pd.read_csv(arguments.source / f"imdb_{split}.csv.gz", keep_default_na=False)
        rows = subset(frame, size)
        target = arguments.output / f"imdb_{split}_subset.csv.gz"
        # gzip with timestamp 0, so rerunning the script reproduces the file's bytes.
        target.write_bytes(gzip.compress(rows.to_csv(index=False).encode("utf-8"), mtime=0))
        counts = rows["label"].value_counts().sort_index().to_dict()
        print(f"{target}: {len(rows)} reviews, labels {counts}, {target.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
