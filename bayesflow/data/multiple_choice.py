"""``multiple_choice``: questions with lettered choices as prompts for a causal language model
(torch-free).

The records are lm-eval's documents of a ``multiple_choice`` task, one a JSONL line or a
CSV row: a question, its choices, the answer's index (or letter). Each question becomes a
prompt (:func:`prompt_of`) whose answer is the next token, one of the choices' label
tokens (:func:`label_tokens`). Prompts are token ids left-padded with :data:`PADDING` to
the longest prompt of every set (train, validation, test, shift: one width, as every
dataset's inputs have), so every answer position is the last column: the model's
forward derives the attention mask and the positions from the padding
(:mod:`bayesflow.llm.choices`) and computes the output layer at that one position only.

Every problem is located: the spec key of the file (``data.path``, ``data.splits.test``,
``data.shift.<name>``), the file's line, the field; a label that is not one token
(``data.labels``); a prompt longer than the model's context.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.data.dataset import DATASETS, Dataset, resolve_path
from bayesflow.data.sniff import check_text, excerpt, names
from bayesflow.data.text import text_encoder
from bayesflow.errors import DataError
from bayesflow.spec.choice import MultipleChoiceSpec, default_labels

__all__ = ["PADDING", "Question", "choice_labels", "continuation_rows", "continuations_of", "label_tokens",
           "multiple_choice", "padded_prompts", "prompt_of", "read_questions"]

# The token id that marks padding in a prompts array (no vocabulary has a negative id).
PADDING = -1
# Problems listed per file before the rest are counted.
SHOWN_PROBLEMS = 8


@dataclass(frozen=True)
class Question:
    """One record: its question, choices, the answer's index and where it was read."""

    question: str
    choices: tuple[str, ...]
    answer: int
    where: str  # "questions.jsonl line 7"


def choice_labels(spec: MultipleChoiceSpec, count: int) -> list[str]:
    """The label of each of ``count`` choices: ``data.labels``, or `` A``, `` B``, …"""
    return list(spec.labels) if spec.labels is not None else default_labels(count)


def read_questions(path: Path, spec: MultipleChoiceSpec, key: str, count: int | None = None) -> list[Question]:
    """The questions of a JSONL or CSV file, each with ``count`` choices (None: as many as
    the first record has).

    Raises:
        DataError: every problem of the file (at most :data:`SHOWN_PROBLEMS` listed), each
            naming ``key``, the file's line and the field.
    """
    if not path.is_file():
        raise DataError(f"{key}: no file {str(path)!r}; check the path")
    kind = path.suffix.lower()
    if kind not in (".jsonl", ".csv"):
        raise DataError(f"{key}: {path.name} is neither JSONL (.jsonl) nor CSV (.csv); convert it to one")
    check_text(path, "JSON objects, one a line" if kind == ".jsonl" else "comma-separated values with a header row")
    questions, problems = [], []
    for line, record in (_json_records if kind == ".jsonl" else _csv_records)(path):
        where = f"{path.name} line {line}"
        try:
            question = _question(record, spec, where, count)
        except ValueError as error:
            problems.append(f"{key}: {where}: {error}")
            continue
        count = len(question.choices) if count is None else count
        questions.append(question)
        if spec.max_questions is not None and len(questions) == spec.max_questions:
            break
    if problems:
        more = len(problems) - SHOWN_PROBLEMS
        raise DataError(problems[:SHOWN_PROBLEMS] + ([f"{key}: and {more} more problems in {path.name}"] if more > 0 else []))
    if not questions:
        raise DataError(f"{key}: {path.name} holds no questions; give a file with at least one record")
    return questions


def _json_records(path: Path) -> Iterator[tuple[int, Any]]:
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            yield line, json.loads(text)
        except json.JSONDecodeError as error:
            yield line, ValueError(f"not JSON ({error.msg} at column {error.colno}): {excerpt(text)}")


def _csv_records(path: Path) -> Iterator[tuple[int, Any]]:
    reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))
    for row in reader:
        yield reader.line_num, row


def _question(record: Any, spec: MultipleChoiceSpec, where: str, count: int | None) -> Question:
    """The question of one record.

    Raises:
        ValueError: naming the field at fault and the fix.
    """
    if isinstance(record, ValueError):
        raise record
    if not isinstance(record, dict):
        raise ValueError(f"is a JSON {type(record).__name__}, not an object with the fields "
                         f"{spec.question!r}, {spec.choices!r} and {spec.answer!r}")
    text = _field(record, spec.question, "question")
    if isinstance(spec.choices, str):
        choices = _choice_list(_field(record, spec.choices, "choices"), spec.choices)
    else:
        choices = [_field(record, name, "choices") for name in spec.choices]
    if not all(isinstance(choice, str) and choice.strip() for choice in choices):
        raise ValueError(f"field {spec.choices!r}: every choice must be a non-empty string, got {excerpt(str(choices))}")
    if count is not None and len(choices) != count:
        raise ValueError(f"field {spec.choices!r} has {len(choices)} choices, but the questions before it have "
                         f"{count}; the label tokens need one number of choices: give every question {count}")
    if spec.labels is not None and len(spec.labels) != len(choices):  # the spec's fault, said once
        raise DataError(f"data.labels: {len(spec.labels)} labels for questions of {len(choices)} choices ({where}); "
                        "give one label per choice")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"field {spec.question!r} must be a non-empty string, got {excerpt(str(text))}")
    letters = [label.strip() for label in choice_labels(spec, len(choices))]
    return Question(text, tuple(choices), _answer(_field(record, spec.answer, "answer"), letters, spec.answer), where)


def _field(record: dict[str, Any], name: str, option: str) -> Any:
    """``record[name]``, the field ``data.<option>`` names."""
    if name not in record or record[name] is None:
        raise ValueError(f"no field {name!r} (its fields: {names(record)}); add it, or name the field that "
                         f"holds it in data.{option}")
    return record[name]


def _choice_list(value: Any, field: str) -> list[Any]:
    """A list of choices: a JSON list (a CSV cell holds its text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if not isinstance(value, list) or len(value) < 2:
        raise ValueError(f"field {field!r} must be a list of at least two choices, got {excerpt(str(value))}")
    return value


def _answer(value: Any, letters: list[str], field: str) -> int:
    """The answer's 0-based index from an integer, its digits, or its letter."""
    if isinstance(value, str) and value.strip() in letters:
        return letters.index(value.strip())
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"field {field!r} is {excerpt(str(value))}: give the answer's 0-based index or its "
                         f"letter ({', '.join(letters)})")
    if not 0 <= value < len(letters):
        raise ValueError(f"field {field!r} is {value}, outside the {len(letters)} choices (0-{len(letters) - 1})")
    return value


def prompt_of(question: Question, spec: MultipleChoiceSpec) -> str:
    """The prompt of ``question``: ``spec.template`` with its lettered choices, one a line
    (a ``scoring: continuation`` template may leave them out)."""
    letters = [label.strip() for label in choice_labels(spec, len(question.choices))]
    lines = "\n".join(spec.choice_format.format(letter=letter, choice=choice)
                      for letter, choice in zip(letters, question.choices))
    return spec.template.format(question=question.question, choices=lines)


def continuations_of(question: Question, spec: MultipleChoiceSpec) -> list[str]:
    """The text scored after the prompt for each choice (``scoring: continuation``)."""
    return [spec.continuation.format(choice=choice) for choice in question.choices]


def label_tokens(
    spec: MultipleChoiceSpec, count: int, model: dict[str, Any] | None, base_dir: Path | None
) -> list[int]:
    """The token id of each choice's label, in the data's tokenizer.

    Raises:
        DataError: ``data.labels`` is not one label per choice, or a label is not exactly one
            token (at ``data.labels``).
    """
    labels = choice_labels(spec, count)
    if spec.labels is not None and len(labels) != count:
        raise DataError(f"data.labels: {len(labels)} labels for questions of {count} choices; give one per choice")
    encode, vocabulary = text_encoder(spec.tokenizer, model, base_dir)
    ids = []
    for label in labels:
        tokens = [int(token) for token in encode(label)]
        if len(tokens) != 1 or not 0 <= tokens[0] < vocabulary:
            fix = ("labels of one byte, e.g. [A, B, C, D], with a template ending in a space (`Answer: `)"
                   if spec.tokenizer == "bytes" else "labels that are one token each")
            raise DataError(f"data.labels: {label!r} is {len(tokens)} tokens {tokens} in the {spec.tokenizer} "
                            f"tokenizer, but a label must be exactly one token of the vocabulary; use {fix}")
        ids.append(tokens[0])
    return ids


def padded_prompts(prompts: list[np.ndarray], width: int | None = None) -> np.ndarray:
    """(n, width) int64 token ids, each prompt at the right and :data:`PADDING` before it
    (``width`` default: the longest prompt's)."""
    width = width or max((len(ids) for ids in prompts), default=1)
    array = np.full((len(prompts), width), PADDING, dtype=np.int64)
    for row, ids in enumerate(prompts):
        array[row, width - len(ids):] = ids
    return array


def _encoded(
    questions: list[Question], spec: MultipleChoiceSpec, encode: Callable[[str], np.ndarray], context: int | None,
    key: str,
) -> list[tuple[Any, int]]:
    """The token ids of each question's prompt, and its answer; with ``scoring:
    continuation``, each choice's (prompt, continuation) ids, and its answer.

    Raises:
        DataError: a prompt longer than the model's ``context`` (naming the longest's line).
    """
    prompts = [encode(prompt_of(question, spec)) for question in questions]
    if spec.scoring == "continuation":
        sequences = [[(ids, encode(text)) for text in continuations_of(question, spec)]
                     for ids, question in zip(prompts, questions)]
        lengths = [max(len(ids) + len(text) for ids, text in choices) for choices in sequences]
        what = "its prompt with its longest choice"
    else:
        lengths, what = [len(ids) for ids in prompts], "its prompt"
    if context is not None:
        over = [(question, length) for question, length in zip(questions, lengths) if length > context]
        if over:
            question, length = max(over, key=lambda item: item[1])
            raise DataError(
                f"{key}: {question.where}: {what} is {length} tokens, longer than the model's context of "
                f"{context} tokens ({len(over)} of the file's {len(prompts)} prompts are); shorten the question "
                "or the template, or drop it"
            )
    if spec.scoring == "continuation":
        empty = [question for question, choices in zip(questions, sequences) if not all(len(t) for _, t in choices)]
        if empty:
            raise DataError(f"{key}: {empty[0].where}: a choice's continuation ({spec.continuation!r}) is no tokens; "
                            "give every choice some text")
        return [(choices, question.answer) for choices, question in zip(sequences, questions)]
    return [(ids, question.answer) for ids, question in zip(prompts, questions)]


def _arrays(encoded: list[tuple[Any, int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompts padded to ``width`` and the answers; with continuations, each question's
    row is :func:`continuation_rows`'."""
    answers = np.asarray([answer for _, answer in encoded], dtype=np.int64)
    if encoded and isinstance(encoded[0][0], list):
        return continuation_rows([choices for choices, _ in encoded], width), answers
    return padded_prompts([ids for ids, _ in encoded], width), answers


def continuation_rows(questions: list[list[tuple[np.ndarray, np.ndarray]]], width: int) -> np.ndarray:
    """(n, width + C) int64: each question's prompt followed by its C continuations, one
    after another, left-padded with :data:`PADDING` to ``width``, then the continuations'
    token counts (``scoring: continuation``; :mod:`bayesflow.llm.choices` packs them so
    each continuation sees only the prompt and itself)."""
    count = len(questions[0]) if questions else 1
    rows = np.full((len(questions), width + count), PADDING, dtype=np.int64)
    for row, choices in enumerate(questions):
        packed = np.concatenate([choices[0][0], *(text for _, text in choices)])
        rows[row, width - len(packed):width] = packed
        rows[row, width:] = [len(text) for _, text in choices]
    return rows


def _width(encoded: list[tuple[Any, int]]) -> int:
    """The longest prompt (with its continuations) of one set's questions."""
    if encoded and isinstance(encoded[0][0], list):
        return max(len(choices[0][0]) + sum(len(text) for _, text in choices) for choices, _ in encoded)
    return max((len(ids) for ids, _ in encoded), default=1)


def _continuation_tokens(encoded: list[tuple[Any, int]]) -> int:
    """The most continuation tokens of one question (all its choices') in one set (0
    without continuations)."""
    if encoded and isinstance(encoded[0][0], list):
        return max(sum(len(text) for _, text in choices) for choices, _ in encoded)
    return 0


def model_context(model: dict[str, Any] | None, base_dir: Path | None) -> int | None:
    """The model's context in tokens: ``model.context``, or its folder's ``config.json``
    (``max_position_embeddings`` / ``n_positions``); None when it cannot be read here (the
    model's own checks say why)."""
    if not model:
        return None
    if model.get("path") is None:
        return int(model["context"]) if isinstance(model.get("context"), int) else None
    from bayesflow.llm.source import check_folder

    try:
        config = json.loads((check_folder(model["path"], base_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for name in ("max_position_embeddings", "n_positions"):
        if isinstance(config.get(name), int):
            return int(config[name])
    return None


def _split(count: int, spec: MultipleChoiceSpec, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``count`` questions for train, validation and test, by the fractions and the
    seed, each in file order."""
    order = np.random.default_rng(spec.split_seed).permutation(count)
    test_fraction, validation_fraction = spec.fractions
    tested, validated = math.ceil(test_fraction * count), math.ceil(validation_fraction * count)
    if count - tested - validated < 1:
        raise DataError(f"data.path: {source} has {count} questions: test_fraction {test_fraction:g} and "
                        f"validation_fraction {validation_fraction:g} leave none to train on; add questions")
    test, validation, train = np.split(order, [tested, tested + validated])
    return np.sort(train), np.sort(validation), np.sort(test)


@DATASETS.register("multiple_choice")
def multiple_choice(base_dir: Path | None = None, model: dict[str, Any] | None = None, **options: Any) -> Dataset:
    """Multiple-choice prompts and answers (see the module docstring); ``model`` is the
    spec's ``model`` section (its tokenizer, vocabulary and context)."""
    spec = MultipleChoiceSpec.model_validate({"name": "multiple_choice", **options})
    encode, _ = text_encoder(spec.tokenizer, model, base_dir)
    context = model_context(model, base_dir)
    if spec.path is not None:
        path = resolve_path(spec.path, base_dir)
        questions = read_questions(path, spec, "data.path")
        encoded = _encoded(questions, spec, encode, context, "data.path")
        parts = [[encoded[row] for row in rows] for rows in _split(len(encoded), spec, path.name)]
    else:
        assert spec.splits is not None
        path = resolve_path(spec.splits.train, base_dir)
        questions = read_questions(path, spec, "data.splits.train")
        parts = [_encoded(questions, spec, encode, context, "data.splits.train")]
        for name in ("validation", "test"):
            given, key = getattr(spec.splits, name), f"data.splits.{name}"
            parts.append([] if given is None else _encoded(
                read_questions(resolve_path(given, base_dir), spec, key, len(questions[0].choices)), spec, encode,
                context, key))
    count = len(questions[0].choices)
    if spec.scoring == "label":
        label_tokens(spec, count, model, base_dir)
    shifted = {name: _encoded(read_questions(resolve_path(file, base_dir), spec, f"data.shift.{name}", count),
                              spec, encode, context, f"data.shift.{name}") for name, file in spec.shift.items()}
    # One width for every set, as every dataset's inputs have: a posterior predicts any of them.
    sets = [*parts, *shifted.values()]
    width = max(_width(part) for part in sets if part)
    (x_train, y_train), (x_validation, y_validation), (x_test, y_test) = (_arrays(part, width) for part in parts)
    shifts = tuple((name, *_arrays(part, width)) for name, part in shifted.items())
    held = len(y_validation) > 0
    return Dataset(
        x_train, y_train, x_test, y_test, "classification", count, source=str(path), target="the answers",
        x_validation=x_validation if held else None, y_validation=y_validation if held else None, shifts=shifts,
        continuation_tokens=max(_continuation_tokens(part) for part in sets) or None,
    )
