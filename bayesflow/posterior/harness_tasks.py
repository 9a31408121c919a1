"""lm-eval tasks scored by a posterior (:class:`~bayesflow.posterior.harness.PosteriorLM`),
with bayesflow's calibration of every multiple-choice task beside lm-eval's own metrics.

:func:`evaluate_tasks` finds the tasks (a folder of task YAML first, lm-eval's own tasks
only for a name the folder lacks: indexing those ≈ 30 s), checks each one loads and asks
for scores rather than generation, runs ``lm_eval.simple_evaluate`` with the documents
logged, and computes, for every ``multiple_choice`` task, the categorical over each
document's choices, softmax of the choices' loglikelihoods (the probabilities lm-eval's
``acc`` takes its argmax of), and from it bayesflow's accuracy, NLL, ECE (equal-width
bins, 10 by default) and Brier (:mod:`bayesflow.evaluate.metrics`). Documents with
fewer choices than others in a task are padded with probability 0, which changes none of
the four. Nothing reaches a hub while it runs (:func:`offline`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.errors import TaskError
from bayesflow.posterior.harness import SUPPORTED, PosteriorLM, require_lm_eval

__all__ = ["DEFAULT_BINS", "TaskEvaluation", "choice_calibration", "evaluate_tasks", "load_task_manager", "offline"]

DEFAULT_BINS = 10
OFFLINE_VARIABLES = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@dataclass
class TaskEvaluation:
    """What :func:`evaluate_tasks` returns.

    Attributes:
        results: lm-eval's result dictionary (``results``, ``configs``, ``samples``, ...).
        calibration: per multiple-choice task, bayesflow's ``documents``, ``accuracy``,
            ``nll``, ``ece``, ``brier`` and the ``bins`` of its ECE, plus ``probabilities``
            (n, C) and ``labels`` (n,).
        skipped: per multiple-choice task with no calibration, why.
    """

    results: dict[str, Any]
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


@contextmanager
def offline() -> Iterator[None]:
    """Keep datasets and the Hugging Face hub offline inside the block: the environment
    variables, and the flags the already-imported libraries read them into."""
    import importlib

    saved = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}
    os.environ.update(dict.fromkeys(OFFLINE_VARIABLES, "1"))
    flags = [("datasets.config", "HF_HUB_OFFLINE"), ("datasets.config", "HF_DATASETS_OFFLINE"),
             ("huggingface_hub.constants", "HF_HUB_OFFLINE")]
    before = []
    for module_name, flag in flags:
        module = importlib.import_module(module_name)
        before.append((module, flag, getattr(module, flag, None)))
        setattr(module, flag, True)
    try:
        yield
    finally:
        for module, flag, value in before:
            setattr(module, flag, value)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_task_manager(tasks: Sequence[str], include_path: str | Path | None = None) -> Any:
    """A ``TaskManager`` that knows every task of ``tasks``, each checked to load and to
    be scored rather than generated.

    Raises:
        TaskError: a task YAML lm-eval cannot read (the file and lm-eval's reason), a name
            found nowhere (with close matches), a task that fails to load (its file and
            lm-eval's reason), or a ``generate_until`` task.
    """
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    folder = None if include_path is None else Path(include_path)
    if folder is not None and not folder.is_dir():
        raise TaskError(f"--include-path: {str(folder)!r} is not a folder of task YAML files")
    manager: Any = TaskManager(include_path=str(folder), include_defaults=False) if folder else None
    missing = _missing(manager, tasks)
    if missing:
        unreadable = _unreadable(folder) if folder else []
        if unreadable:
            raise TaskError(
                f"lm-eval cannot read {len(unreadable)} task file(s) in {str(folder)!r}, so "
                f"{', '.join(map(repr, missing))} is not found: "
                + "; ".join(f"{path}: {reason}" for path, reason in unreadable)
            )
        manager = TaskManager(include_path=str(folder) if folder else None)  # lm-eval's own tasks too
        missing = _missing(manager, tasks)
    if missing:
        known = manager.all_tasks
        hints = [f"{name!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(name, known, 1))
                                else "") for name in missing]
        where = f"{str(folder)!r} or lm-eval's own tasks" if folder else "lm-eval's own tasks (add --include-path DIR)"
        raise TaskError(f"no task {', '.join(hints)} in {where}")
    for name in tasks:
        _check_task(manager, name)
    return manager


def _missing(manager: Any, tasks: Sequence[str]) -> list[str]:
    if manager is None:
        return list(tasks)
    return [name for name in tasks if name not in manager.task_index and not Path(name).is_file()]


def _unreadable(folder: Path) -> list[tuple[str, str]]:
    """Every YAML under ``folder`` lm-eval's loader refuses, with its reason (its index skips
    them silently)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    found = []
    for path in sorted(folder.rglob("*.yaml")):
        try:
            load_yaml(path, resolve_func=False)
        except Exception as error:  # noqa: BLE001 - yaml, include and key errors alike: report them all
            found.append((str(path), _reason(error)))
    return found


def _check_task(manager: Any, name: str) -> None:
    """Load ``name`` (its dataset too) and refuse a generative one, naming its file."""
    entry = manager.task_index.get(name)
    source = str(entry.yaml_path) if entry is not None and entry.yaml_path else name
    try:
        loaded = manager.load([name])
    except Exception as error:  # lm-eval raises any kind here; its reason is the message
        raise TaskError(f"task {name!r} ({source}): lm-eval cannot load it: {_reason(error)}") from error
    for task_name, task in loaded["tasks"].items():
        output_type = task.config.output_type
        if output_type not in SUPPORTED:
            raise TaskError(
                f"task {task_name!r} ({source}) is a {output_type} task: it asks the model to write "
                f"text, and a bayesflow posterior scores text (output types {', '.join(SUPPORTED)}); "
                "drop it from --tasks"
            )


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def evaluate_tasks(
    model: PosteriorLM, tasks: Sequence[str], include_path: str | Path | None = None,
    limit: int | None = None, bins: int = DEFAULT_BINS, task_manager: Any = None,
) -> TaskEvaluation:
    """Score ``tasks`` with ``model`` through ``lm_eval.simple_evaluate`` (module docstring).

    Args:
        model: the posterior as an lm-eval model.
        tasks: task names (or task YAML paths).
        include_path: a folder of task YAML files.
        limit: at most this many documents per task.
        bins: equal-width bins of the ECE.
        task_manager: the tasks' manager, already checked (:func:`load_task_manager`);
            None: made here from ``include_path``.

    Raises:
        TaskError: as :func:`load_task_manager`.
    """
    with offline():
        manager = task_manager if task_manager is not None else load_task_manager(tasks, include_path)
        from lm_eval import simple_evaluate

        results = simple_evaluate(model=model, tasks=list(tasks), task_manager=manager, limit=limit,
                                  log_samples=True)
    evaluation = TaskEvaluation(results)
    for task, config in results.get("configs", {}).items():
        if config.get("output_type") != "multiple_choice":
            continue
        calibration = choice_calibration(results.get("samples", {}).get(task, []), bins)
        if isinstance(calibration, str):
            evaluation.skipped[task] = calibration
        else:
            evaluation.calibration[task] = calibration
    return evaluation


def choice_calibration(samples: Sequence[dict[str, Any]], bins: int = DEFAULT_BINS) -> dict[str, Any] | str:
    """Accuracy, NLL, ECE and Brier of the choice probabilities of a multiple-choice task's
    logged documents, or why they cannot be computed (a document without one gold index)."""
    from bayesflow.evaluate.metrics import accuracy, brier, ece, nll

    rows, labels = [], []
    for sample in samples:
        scores = np.asarray([_loglikelihood(response) for response in sample["filtered_resps"]], dtype=np.float64)
        label = _label(sample)
        if label is None:
            return f"document {sample.get('doc_id')}: its target {sample.get('target')!r} is not one choice's index"
        probabilities = np.exp(scores - scores.max())
        rows.append(probabilities / probabilities.sum())
        labels.append(label)
    if not rows:
        return "no documents were scored"
    width = max(len(row) for row in rows)
    probabilities = np.zeros((len(rows), width))
    for index, row in enumerate(rows):
        probabilities[index, : len(row)] = row
    targets = np.asarray(labels, dtype=np.int64)
    return {"documents": len(rows), "accuracy": accuracy(probabilities, targets), "nll": nll(probabilities, targets),
            "ece": ece(probabilities, targets, bins=bins), "brier": brier(probabilities, targets), "bins": bins,
            "probabilities": probabilities, "labels": targets}


def _loglikelihood(response: Any) -> float:
    """A choice's loglikelihood from lm-eval's ``(loglikelihood, is_greedy)`` response."""
    return float(response[0] if isinstance(response, (tuple, list)) else response)


def _label(sample: dict[str, Any]) -> int | None:
    """The gold choice's index: an int target, a digit string, or a choice's text."""
    target, choices = sample.get("target"), [str(argument[1]).strip() for argument in sample.get("arguments", [])]
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        index = int(target)
    elif isinstance(target, str) and target.strip().isdigit():
        index = int(target.strip())
    elif isinstance(target, str) and target.strip() in choices:
        index = choices.index(target.strip())
    else:
        return None
    return index if 0 <= index < len(choices) else None
