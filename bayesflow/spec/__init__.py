"""Workflow specs: pydantic models, safe YAML loading, overrides and error locations.

This package never imports torch. Its names are loaded on first use, so that the method
modules can import the spec base (:mod:`bayesflow.spec.strict`) without loading the
whole spec language first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LoadedSpec", "WorkflowSpec", "load_spec"]


def __getattr__(name: str) -> Any:
    if name in ("LoadedSpec", "load_spec"):
        from bayesflow.spec import load

        return getattr(load, name)
    if name == "WorkflowSpec":
        from bayesflow.spec.models import WorkflowSpec

        return WorkflowSpec
    raise AttributeError(f"module 'bayesflow.spec' has no attribute {name!r}")
