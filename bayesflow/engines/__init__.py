"""The inference engine registry: a spec's ``engine:`` value → ``build``.

Every builder has the signature ``build(problem, tempering, config) -> Engine`` where
``config`` is the method's pydantic spec model (:mod:`bayesflow.spec.methods`).
"""

from __future__ import annotations

from typing import Any

from bayesflow.registry import Registry

__all__ = ["ENGINES"]

ENGINES: Registry[Any] = Registry("engine")

# Importing the modules registers their engines.
from bayesflow.engines import laplace, optimize, sghmc, vi  # noqa: F401
