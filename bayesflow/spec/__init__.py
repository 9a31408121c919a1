"""Workflow specs: pydantic models, safe YAML loading, overrides and error locations.

This package never imports torch.
"""

from __future__ import annotations

from bayesflow.spec.load import LoadedSpec, load_spec
from bayesflow.spec.methods import ENGINE_SPECS
from bayesflow.spec.models import WorkflowSpec

__all__ = ["ENGINE_SPECS", "LoadedSpec", "WorkflowSpec", "load_spec"]
