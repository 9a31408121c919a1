"""The ``multiple_choice`` data and likelihood blocks (torch-free): questions with a fixed
number of choices, asked of a causal language model (``model: {name: causal_lm}``) as a
prompt whose answer is the next token.

The records are lm-eval's documents of a ``multiple_choice`` task: a question (or context),
its choices and the index of the answer. :mod:`bayesflow.data.multiple_choice` reads them;
the likelihood is :class:`bayesflow.llm.likelihood.MultipleChoice`.
"""

from __future__ import annotations

import re
import string
from typing import ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, ValidationInfo, field_validator, model_validator

from bayesflow.spec.strict import Strict

__all__ = ["CONTINUATION_TEMPLATE", "DEFAULT_CONTINUATION", "DEFAULT_TEMPLATE", "ChoiceSplitsSpec", "MultipleChoiceLikelihoodSpec", "MultipleChoiceSpec",
           "default_labels"]

DEFAULT_TEMPLATE = "Question: {question}\n{choices}\nAnswer:"
# The prompt of `scoring: continuation` when no template is given: the question alone, each
# choice's text the continuation scored after it (lm-eval's ARC and OpenBookQA prompts).
CONTINUATION_TEMPLATE = "Question: {question}\nAnswer:"
DEFAULT_CONTINUATION = " {choice}"
# The share of `path`'s questions held out for testing when `test_fraction` is not given.
DEFAULT_TEST_FRACTION = 0.2
# A shift set's name, the suffix of its metrics (an MLflow metric name's characters).
SHIFT_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# The placeholders a template may hold; both are required.
TEMPLATE_FIELDS = frozenset({"question", "choices"})


def default_labels(count: int) -> list[str]:
    """`` A``, `` B``, …: one label per choice, the letter after a space (the token a
    BPE tokenizer gives a letter that follows ``Answer:``)."""
    return [f" {letter}" for letter in string.ascii_uppercase[:count]]


class ChoiceSplitsSpec(Strict):
    """Split files: each a JSONL or CSV file of questions."""

    train: str = Field(description="The training questions.")
    validation: str | None = Field(None, description="Validation questions (`val_*` metrics); null: none.")
    test: str | None = Field(None, description="Test questions; null: none held out.")


class MultipleChoiceSpec(Strict):
    """Multiple-choice questions for a causal language model, in lm-eval's document shape: a
    JSONL file (one JSON object a line) or a CSV file (a header row) whose records hold a
    question, its choices and the index of the answer. Each question becomes a prompt
    (`template`, with the choices lettered by `choice_format`); the model's next-token
    logits of the choices' `labels` at the prompt's last position are the categorical over
    the choices (the `multiple_choice` likelihood). With `scoring: continuation` the logits
    are instead each choice's text scored after the prompt (the summed log-probability of its
    tokens, lm-eval's convention for ARC or OpenBookQA). Every question is one datum (N =
    questions). Prompts are left-padded (the padding is stored as -1 and masked), so every
    prompt's answer position is the last one.
    """

    name: Literal["multiple_choice"] = Field(description="Registry name of the dataset.")
    INPUTS: ClassVar[str] = "choice_prompts"
    path: str | None = Field(
        None, description="One JSONL (`.jsonl`) or CSV (`.csv`) file of questions, split into "
        "train, validation and test by `test_fraction`, `validation_fraction` and `split_seed`; "
        "relative to the spec file, or `package:NAME`. Give exactly one of `path` and `splits`.",
    )
    splits: ChoiceSplitsSpec | None = Field(
        None, description="Given split files instead of `path`: `{train: ..., validation: ..., test: ...}`."
    )
    question: str = Field("question", description="The field (JSON key or CSV column) of the question or context.")
    choices: str | list[str] = Field(
        "choices", description="The field holding the list of choices (a JSON list; in a CSV cell, "
        "a JSON list), or a list of fields, one per choice (a CSV's `[A, B, C, D]` columns)."
    )
    answer: str = Field(
        "answer", description="The field of the answer: its 0-based index among the choices, or its "
        "letter (the label without spaces, `A`)."
    )
    scoring: Literal["label", "continuation"] = Field(
        "label", description="How a choice is scored. `label`: the next-token logit of its label "
        "token (` A`, ...) after a prompt that lists the lettered choices (the Laplace-LoRA / BLoB "
        "convention; a small model is near chance this way). `continuation`: the summed "
        "log-probability of its text (`continuation`) after the prompt, the categorical's logit "
        "(lm-eval's `acc` convention; each question costs C sequences)."
    )
    template: str = Field(
        DEFAULT_TEMPLATE, description="The prompt, with `{question}` and `{choices}` (the lettered "
        "choices, one a line); the answer's label is the token after it. With `scoring: "
        "continuation` `{choices}` is optional and the default is `Question: {question}\\nAnswer:`."
    )
    continuation: str = Field(
        DEFAULT_CONTINUATION, description="With `scoring: continuation`: the text scored after the "
        "prompt for each choice, with `{choice}` (the leading space joins it to the prompt's last "
        "word as a tokenizer expects)."
    )
    choice_format: str = Field(
        "{letter}. {choice}", description="One choice's line in the prompt, with `{letter}` (its "
        "label without spaces) and `{choice}`."
    )
    labels: list[str] | None = Field(
        None, min_length=2, description="The label token of each choice, in order, each exactly one "
        "token of the model's vocabulary; null: ` A`, ` B`, ... (one per choice). With `tokenizer: "
        "bytes` a label is one byte: write `[A, B, C, D]` and end the template with a space "
        "(`Answer: `)."
    )
    tokenizer: Literal["bytes", "model"] = Field(
        "bytes", description="`bytes`: UTF-8 bytes as token ids 0-255; `model`: the tokenizer of the "
        "model folder (`model.path`). No special tokens are added."
    )
    test_fraction: float | None = Field(
        None, ge=0, lt=1, description="Share of the questions of `path` held out for testing; null: 0.2."
    )
    validation_fraction: float | None = Field(
        None, ge=0, lt=1, description="Share of the questions of `path` held out for validation (`val_*` "
        "metrics); null: 0."
    )
    split_seed: NonNegativeInt = Field(0, description="Seed of the random split of `path`'s questions.")
    max_questions: PositiveInt | None = Field(
        None, description="Use only the first this many questions of each file; null: all."
    )
    shift: dict[str, str] = Field(
        default_factory=dict, description="Named distribution-shift sets, `{name: file}`: questions "
        "of the same shape read and checked with the data; the evaluate stage logs each set's "
        "`shift_accuracy_<name>`, `shift_nll_<name>`, `shift_ece_<name>`, `shift_brier_<name>` and "
        "the AUROCs of TU and EU against the test questions, `shift_auroc_total_<name>` and "
        "`shift_auroc_epistemic_<name>`."
    )

    @field_validator("shift")
    @classmethod
    def _shift_names(cls, shift: dict[str, str]) -> dict[str, str]:
        bad = [name for name in shift if not SHIFT_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"shift set names end metric names (shift_accuracy_<name>): use letters, digits, "
                             f"`_`, `-` or `.`, got {bad}")
        return shift

    @field_validator("template")
    @classmethod
    def _template_fields(cls, template: str, info: ValidationInfo) -> str:
        named = _placeholders(template)
        continuation = info.data.get("scoring") == "continuation"
        if not ({"question"} if continuation else TEMPLATE_FIELDS) <= named or named - TEMPLATE_FIELDS:
            example = CONTINUATION_TEMPLATE if continuation else DEFAULT_TEMPLATE
            wanted = "{question} (and {choices} if the prompt lists them)" if continuation else "{question} and {choices}"
            raise ValueError(f"needs the placeholders {wanted} and no others, got {sorted(named) or 'none'}; "
                             f"e.g. {example!r}")
        return template

    @field_validator("continuation")
    @classmethod
    def _continuation_field(cls, continuation: str) -> str:
        if _placeholders(continuation) != {"choice"}:
            raise ValueError(f"needs the placeholder {{choice}} and no other, got "
                             f"{sorted(_placeholders(continuation)) or 'none'}; e.g. {DEFAULT_CONTINUATION!r}")
        return continuation

    @model_validator(mode="after")
    def _continuation_template(self) -> MultipleChoiceSpec:
        if self.scoring == "continuation" and "template" not in self.model_fields_set:
            self.template = CONTINUATION_TEMPLATE  # the default lists no choices
        return self

    @field_validator("choice_format")
    @classmethod
    def _choice_fields(cls, choice_format: str) -> str:
        named = _placeholders(choice_format)
        if named != {"letter", "choice"}:
            raise ValueError(f"needs the placeholders {{letter}} and {{choice}}, got {sorted(named) or 'none'}")
        return choice_format

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None:
            letters = [label.strip() for label in labels]
            if not all(letters) or len(set(letters)) != len(letters):
                raise ValueError(f"labels must be distinct and not only spaces, got {labels}")
        return labels

    @model_validator(mode="after")
    def _source(self) -> MultipleChoiceSpec:
        if (self.path is None) == (self.splits is None):
            raise ValueError("give exactly one of `path` (split by fractions) or `splits` (given files)")
        given = [key for key in ("test_fraction", "validation_fraction") if getattr(self, key) is not None]
        if self.splits is not None and given:
            raise ValueError(f"{' and '.join(given)} split `path`; the `splits` files are split already")
        if sum(self.fractions) >= 1:
            raise ValueError("test_fraction + validation_fraction must leave questions to train on")
        return self

    @property
    def fractions(self) -> tuple[float, float]:
        """The shares of `path`'s questions held out for testing and for validation."""
        test = DEFAULT_TEST_FRACTION if self.test_fraction is None else self.test_fraction
        return test, self.validation_fraction or 0.0


class MultipleChoiceLikelihoodSpec(Strict):
    """The categorical over a question's choices whose logits are the causal language
    model's next-token logits of the choices' label tokens at the prompt's last position
    (the Laplace-LoRA and BLoB convention), with `multiple_choice` data: every question is
    one datum, so N is the number of questions."""

    name: Literal["multiple_choice"] = Field(description="Registry name of the likelihood.")
    TASK: ClassVar[str] = "classification"


def _placeholders(template: str) -> set[str]:
    """The ``{name}`` fields of a format string (a malformed one: ``{'<malformed>'}``)."""
    try:
        return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError:
        return {"<malformed>"}
