"""Evaluations beyond the predictive metrics, registered by the ``evaluate`` key that turns
them on (torch-free: the planner reads this table, the evaluate stage runs its entries).

An evaluator runs inside a cell's evaluate stage after the predictive metrics, as
``function(context, stage, problem, posterior) -> (metrics, conventions, arrays)``. One
whose inputs are files read with the data (``reads_files``) has their digest in the
evaluation's key, so that editing the files recomputes it. A new evaluation is a settings
class in :mod:`bayesflow.spec.settings`, one function, and one row here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["EVALUATORS", "Evaluator", "active_evaluators"]


@dataclass(frozen=True)
class Evaluator:
    """One registered evaluation.

    Attributes:
        key: the ``evaluate`` setting that turns it on (set and not null).
        function: ``"module:function"``, imported when it runs.
        reads_files: its inputs are files loaded with the data (their digest is
            ``Dataset.reference_digest``), part of the evaluation's key under ``key``.
    """

    key: str
    function: str
    reads_files: bool = False

    def load(self) -> Callable[..., tuple[dict[str, float], dict[str, str], dict[str, Any]]]:
        """The evaluation function (imports its module)."""
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


EVALUATORS: tuple[Evaluator, ...] = (
    # A language model's last word of statements, in distribution and out of it.
    Evaluator("statements", "bayesflow.stages.statements:statement_evaluation", reads_files=True),
)


def active_evaluators(settings: Any) -> list[Evaluator]:
    """The evaluators an ``evaluate`` section turns on, in registry order."""
    return [evaluator for evaluator in EVALUATORS if getattr(settings, evaluator.key, None) is not None]
