"""Checks that span sections of a validated spec: does the likelihood fit the data?

Built-in datasets are known statically (``bayesflow validate`` needs no data for them); a
``csv`` dataset's target column is read, and only that column, to learn whether it holds
class labels or real values. Problems come back as ``(key path, message)`` pairs so the
loader can point at the line of the key at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bayesflow.errors import SpecError
from bayesflow.spec.models import WorkflowSpec

__all__ = ["DATASET_TARGETS", "check_data", "likelihood_problem", "located"]

Problem = tuple[tuple[str, ...], str]

def _digits_target(data: Any) -> tuple[str, int | None]:
    """scikit-learn's load_digits: labels 0..9, less the classes held out as OOD inputs."""
    held = set(getattr(data, "holdout_classes", None) or [])
    return "classification", 10 - len(held)


# The target of each built-in dataset, from its spec: task and number of classes (None for
# a real-valued target).
DATASET_TARGETS: dict[str, Callable[[Any], tuple[str, int | None]]] = {
    "sklearn_digits": _digits_target,
    "none": lambda data: ("energy", None),
    "imdb": lambda data: ("classification", 2),
}
CLASSIFICATION_LIKELIHOODS = ("categorical", "bernoulli")


def likelihood_problem(
    likelihood: str, task: str, classes: int | None, target: str, strict: bool = True
) -> str | None:
    """Why ``likelihood`` does not fit a ``task`` target, or None when it does.

    Args:
        likelihood: the likelihood's registry name.
        task: ``"classification"`` or ``"regression"``.
        classes: the number of classes of a classification target.
        target: how to name the target in the message.
        strict: also refuse a ``gaussian`` likelihood on class labels (known datasets; a
            csv column of small integers may well be a count to regress on).
    """
    if (likelihood == "energy") != (task == "energy"):
        return (
            "the `energy` likelihood (the model's output is the log density) goes with "
            f"`data: {{name: none}}` and only with it, but got `{likelihood}` on {target}; "
            "pair them, e.g. with `model: {name: double_well}`"
        )
    if likelihood in CLASSIFICATION_LIKELIHOODS and task == "regression":
        return (
            f"`{likelihood}` needs integer class labels, but {target} is real-valued; "
            "use `gaussian`, or a target column of class labels 0, 1, ..."
        )
    if likelihood == "bernoulli" and classes is not None and classes > 2:
        return (
            f"`bernoulli` needs a binary target (0/1), but {target} has {classes} classes; "
            "use `categorical`"
        )
    if strict and likelihood == "gaussian" and task == "classification":
        return (
            f"`gaussian` is for a real-valued target, but {target} is a classification "
            f"dataset ({classes} classes); use `categorical`"
        )
    return None


def check_data(spec: WorkflowSpec, base_dir: Path | None) -> list[Problem]:
    """Whether the spec's likelihood fits its data (reads a csv file's target column)."""
    data, likelihood = spec.data, spec.likelihood.name
    if data.name in DATASET_TARGETS:
        task, classes = DATASET_TARGETS[data.name](data)
        message = likelihood_problem(likelihood, task, classes, data.name)
    elif data.name == "csv":
        from bayesflow.data import csv_target_task, resolve_path

        path, target = data.path, data.target
        try:
            task, classes = csv_target_task(path, target, base_dir, type(spec.likelihood).TASK)
        except SpecError as error:
            return [_relocated(problem) for problem in error.problems]
        label = f"the target column {target!r} of {resolve_path(path, base_dir).name}"
        message = likelihood_problem(likelihood, task, classes, label, strict=False)
    else:
        return []
    return [(("likelihood", "name"), message)] if message else []


def _relocated(problem: str) -> Problem:
    """``"data.path: message"`` (the data layer's form) as a key path and a message."""
    key, _, message = problem.partition(": ")
    if message and key.startswith("data") and " " not in key:
        return tuple(key.split(".")), message
    return ("data",), problem


def located(error: SpecError, locations: dict[tuple[str, ...], Any], source: str) -> SpecError:
    """``error`` raised after loading (by the data, the user's model, ``model.python:
    ...``, or the reference file, ``evaluate.reference.file``) with each problem that
    starts with a key of ``data``, ``model`` or ``evaluate`` pointed at
    that key's line of the spec file, as the loader points at its own problems."""
    from bayesflow.spec.errors import format_cross_problems

    problems = []
    for problem in error.problems:
        key, _, message = problem.partition(": ")
        if message and key.split(".")[0] in ("data", "model", "evaluate") and " " not in key:
            problems += format_cross_problems([(tuple(key.split(".")), message)], locations, source)
        else:
            problems.append(problem)
    return type(error)(problems, source)  # a DataError stays one
