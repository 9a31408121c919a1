"""The ``text`` data block (torch-free): documents cut into token windows for a causal
language model (``model: {name: causal_lm}``) and its ``next_token`` likelihood.

:mod:`bayesflow.data.text` loads it (through :mod:`bayesflow.llm.text`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from bayesflow.spec.strict import Strict

__all__ = ["TextSpec"]


class TextSpec(Strict):
    """Text for a causal language model: a CSV column or text files (one document each),
    tokenised and cut into windows of `length` tokens every `stride` tokens, a window never
    spanning two documents. The last `scored` tokens of each window are its targets (the
    `next_token` likelihood); every scored token is one datum (N = windows × scored).

    Each document is split by position: its last `test_fraction` of tokens gives the test
    windows, the `validation_fraction` before that the validation windows, the rest the
    training windows; no window spans a cut, so no token is both trained on and tested.
    """

    name: Literal["text"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "text_tokens"
    csv: str | None = Field(
        None,
        description="A CSV file (`.csv` or `.csv.gz`, relative to the spec file, or "
        "`package:NAME` for a file shipped with bayesflow, e.g. "
        "`package:imdb_train_subset.csv.gz`) whose `column` holds one document per row. "
        "Give exactly one of `csv` and `files`.",
    )
    column: str | None = Field(None, description="The CSV column holding the documents (with `csv`).")
    files: list[str] | None = Field(
        None,
        min_length=1,
        description="UTF-8 text files, one document each (relative to the spec file, or "
        "`package:...`); a folder stands for its `*.txt` files in name order.",
    )
    length: PositiveInt = Field(64, description="Tokens per window (at most the model's context).")
    stride: PositiveInt | None = Field(
        None, description="Tokens between the starts of two windows; null: `length` (no overlap)."
    )
    scored: PositiveInt = Field(
        16, description="The last tokens of each window that are scored (at least 1, below `length`)."
    )
    tokenizer: Literal["bytes", "model"] = Field(
        "bytes",
        description="`bytes`: UTF-8 bytes as token ids 0-255 (nothing downloaded; the model's "
        "`vocab_size` must be at least 256); `model`: the tokenizer of the model folder "
        "(`model.path`).",
    )
    test_fraction: float = Field(
        0.15,
        ge=0,
        lt=1,
        description="Share of each document's tokens, at its end, held out for testing (the "
        "posteriors paper holds out the last 15% of each book); 0 holds out none.",
    )
    validation_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of each document's tokens, just before its test part, held out for "
        "validation: every fit then logs `val_*` metrics and the report chooses each "
        "method's best temperature on them.",
    )
    max_documents: PositiveInt | None = Field(
        None, description="Use only the first this many documents; null: all."
    )
    episodes: bool = Field(
        False,
        description="One episode per document, in order (for `continual` methods); each "
        "episode's test windows are its document's last `test_fraction`.",
    )
    @model_validator(mode="after")
    def _source(self) -> TextSpec:
        if (self.csv is None) == (self.files is None):
            raise ValueError("give exactly one of `csv` (with `column`) or `files`")
        if self.csv is not None and self.column is None:
            raise ValueError("`csv` needs `column`, the column that holds the documents")
        if self.files is not None and self.column is not None:
            raise ValueError("`column` goes with `csv`; text files are one document each")
        if self.test_fraction + self.validation_fraction >= 1:
            raise ValueError("test_fraction + validation_fraction must leave tokens to train on")
        if self.episodes and self.test_fraction == 0:
            raise ValueError("episodes need test windows in every document; set test_fraction > 0")
        return self

    @property
    def step(self) -> int:
        """Tokens between window starts (``stride``, default ``length``)."""
        return self.stride or self.length
