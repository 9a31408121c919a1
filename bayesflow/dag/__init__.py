"""Planning a spec into stages, the stage cache, and executing a plan (algorithm-free)."""

from __future__ import annotations

from bayesflow.dag.cache import Cache, Entry
from bayesflow.dag.execute import Outcome, execute, stage_status
from bayesflow.dag.plan import Plan, Stage, plan_workflow

__all__ = ["Cache", "Entry", "Outcome", "Plan", "Stage", "execute", "plan_workflow", "stage_status"]
