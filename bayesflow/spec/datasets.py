"""The data a spec names (torch-free): the ``data`` block, a discriminated union on
``name`` of the datasets :mod:`bayesflow.data` builds (a user's own, ``python``, is in
:mod:`bayesflow.spec.user_data`). What a dataset feeds a model (``INPUTS``: numeric
``features``, integer ``tokens``, or ``none``) is checked against what the model reads
(its ``ACCEPTS``) by the spec's cross-key checks."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    Field,
    PositiveInt,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from bayesflow.spec.strict import Strict
from bayesflow.spec.choice import MultipleChoiceSpec
from bayesflow.spec.text import TextSpec
from bayesflow.spec.user_data import PythonDataSpec

__all__ = [
    "CsvSpec", "DataSpec", "ImdbSpec", "MultipleChoiceSpec", "NoDataSpec", "SklearnDigitsSpec", "TextSpec",
    "validation_field",
]


def validation_field(rows: str) -> float:
    """The ``validation_fraction`` field of a dataset whose training ``rows`` it splits."""
    return Field(
        0.0,
        ge=0,
        lt=1,
        description=f"Share of the training {rows} held out for validation (drawn from "
        "`split_seed`, stratified by label for classes; the test rows stay the same): every "
        "fit then logs `val_*` metrics beside `test_*`, and the report chooses each method's "
        "best temperature on them. 0 holds out none (the report then chooses on test).",
    )


class SklearnDigitsSpec(Strict):
    """scikit-learn's 8×8 digits (1,797 images, 10 classes), shipped with scikit-learn."""

    name: Literal["sklearn_digits"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "features"
    test_fraction: float = Field(0.5, gt=0, lt=1, description="Share of points held out for testing.")
    split_seed: int = Field(0, description="Seed of the stratified train/test split.")
    validation_fraction: float = validation_field("images")
    standardize: bool = Field(True, description="Scale pixel values to [0, 1].")
    episodes: int = Field(
        0,
        ge=0,
        le=10,
        description="Episodes of data that arrive in sequence for `continual` methods; 0 "
        "means none. See `episode_kind`.",
    )
    episode_kind: Literal["permuted", "classes"] = Field(
        "permuted",
        description="`permuted`: episode k shows every image with its pixels in a fixed "
        "random order of its own (episode 0 unpermuted), the same ten classes each time "
        "(domain-incremental, as permuted MNIST); `classes`: the digits split into tasks of "
        "consecutive classes ({0,1}, {2,3}, ... for 5; class-incremental).",
    )
    holdout_classes: list[int] = Field(
        [],
        description="Digits removed from training and testing; their images become the "
        "out-of-distribution inputs of the evaluation (OOD AUROC of total and epistemic "
        "uncertainty).",
    )

    @field_validator("holdout_classes")
    @classmethod
    def _known_digits(cls, classes: list[int]) -> list[int]:
        unknown = sorted({c for c in classes if not 0 <= c <= 9})
        if unknown:
            raise ValueError(f"holdout_classes must be digits 0-9; got {unknown}")
        if len(set(classes)) > 8:
            raise ValueError("holdout_classes must leave at least two classes to train on")
        return classes


class CsvSpec(Strict):
    """A CSV file with a header row: numeric feature columns and one target column."""

    name: Literal["csv"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "features"
    path: str = Field(
        description="Path of the CSV file (relative to the spec file), or `package:NAME` "
        "for a file shipped with bayesflow (e.g. `package:pima_indians_diabetes.csv`)."
    )
    target: str = Field(description="Name of the target column.")
    test_fraction: float = Field(0.25, ge=0, lt=1, description="Share of rows held out for "
                                 "testing; 0 fits on every row and skips the predictive metrics.")
    split_seed: int = Field(0, description="Seed of the train/test split.")
    validation_fraction: float = validation_field("rows")
    split_column: str | None = Field(
        None,
        description="A column saying which part each row belongs to: `train`, `validation` or "
        "`test` (validation optional); it is not a feature. Replaces the random split, so "
        "`test_fraction` and `validation_fraction` must be left out.",
    )
    standardize: bool = Field(True, description="Standardise features with training statistics.")

    @model_serializer(mode="wrap")
    def _without_unused_fractions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """With a ``split_column`` the dump (``validate --resolved``, cache keys) leaves out
        the fractions it replaces, which a spec must not give beside it: the dump loads back."""
        dumped: dict[str, Any] = handler(self)
        if self.split_column is not None:
            for key in ("test_fraction", "validation_fraction"):
                dumped.pop(key, None)
        return dumped


class ImdbSpec(Strict):
    """IMDB movie reviews (Maas et al., 2011) as padded sequences of token ids, labelled 1
    (positive) or 0 (negative): the data of the cold-posterior CNN-LSTM experiments.

    The vocabulary is built on the training reviews only; a review becomes its last
    `max_length` word ids (Keras' `pad_sequences` convention, as in Wenzel et al., 2020 and
    the posteriors IMDB example). Use with `model: {name: cnn_lstm, vocabulary_size:
    ${data.vocab_size}}` and a `categorical` or `bernoulli` likelihood.
    """

    name: Literal["imdb"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "tokens"
    path: str = Field(
        "package:imdb",
        description="Folder holding the reviews (relative to the spec file): "
        "`imdb_train.csv.gz` and `imdb_test.csv.gz` (columns `text`, `label`; `rating`, "
        "`id` ignored), the `aclImdb` layout (`train/pos/*.txt`, `train/neg/*.txt`, "
        "`test/...`), or a Hugging Face `DatasetDict` saved with `save_to_disk`. "
        "`package:imdb` is the subset shipped with bayesflow: 2,000 training and 1,000 test "
        "reviews, balanced, each cut to its last 1,200 characters.",
    )
    source: Literal["auto", "csv", "aclimdb", "huggingface"] = Field(
        "auto",
        description="Form of the folder; `auto` detects it. `huggingface` needs the "
        "`datasets` package and never downloads.",
    )
    vocab_size: int = Field(
        20_000,
        ge=3,
        description="Token ids in all: 0 pads, 1 is every word outside the vocabulary, and "
        "2.. are the vocab_size − 2 most frequent words of the training reviews (20,000 in "
        "the papers). The model's `vocabulary_size` must be at least this.",
    )
    max_length: PositiveInt = Field(
        100, description="Token ids per review, after truncation and padding (100 in the papers)."
    )
    padding: Literal["pre", "post"] = Field(
        "pre",
        description="Where a short review is padded with id 0: `pre` before its words "
        "(Keras' default, so the LSTM ends on words), `post` after them.",
    )
    truncating: Literal["pre", "post"] = Field(
        "pre",
        description="Which words of a long review are dropped: `pre` its first ones, "
        "keeping the end (Keras' default, the papers' data), `post` its last ones.",
    )
    max_train: PositiveInt | None = Field(
        None,
        description="Keep this many training reviews, drawn stratified by label; null keeps "
        "all. The vocabulary is built on the reviews kept.",
    )
    max_test: PositiveInt | None = Field(
        None, description="Keep this many test reviews, drawn stratified by label; null keeps all."
    )
    subset_seed: int = Field(0, description="Seed of the `max_train` and `max_test` draws.")
    validation_fraction: float = validation_field("reviews (after `max_train`; the vocabulary is built on the rest)")
    split_seed: int = Field(0, description="Seed of the validation split.")


class NoDataSpec(Strict):
    """No data: one empty pseudo-datum, so that the log posterior is the model's output
    plus the log prior. With the `energy` likelihood this samples a fixed energy such as
    the `double_well` model."""

    name: Literal["none"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "none"


DataSpec = Annotated[
    Union[SklearnDigitsSpec, CsvSpec, ImdbSpec, NoDataSpec, PythonDataSpec, TextSpec, MultipleChoiceSpec],
    Field(discriminator="name"),
]
