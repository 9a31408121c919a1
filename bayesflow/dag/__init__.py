"""Planning a spec into stages, the stage cache, and executing a plan (algorithm-free)."""

from __future__ import annotations

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.executors import Executor, make_executor
from bayesflow.dag.plan import Plan, Stage, plan_workflow
from bayesflow.dag.scheduler import Outcome, execute, stage_status

__all__ = [
    "Cache", "Entry", "Executor", "Outcome", "Plan", "Stage", "execute", "make_executor",
    "plan_workflow", "stage_status",
]
