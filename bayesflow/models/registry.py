"""The registry of networks a spec can name (filled by the modules of this package)."""

from __future__ import annotations

from typing import Any

from bayesflow.registry import Registry

__all__ = ["MODELS"]

MODELS: Registry[Any] = Registry("model")
