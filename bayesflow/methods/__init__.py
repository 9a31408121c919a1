"""The inference methods: one module per method family, each declaring ``METHODS``.

A method module holds its spec class (the settings a YAML spec gives it), its traits
(what the planner, the spec checks and the report need to know) and its ``build``
function. Modules are torch-free at import; torch is imported when an engine is built.
See ``docs/design.md`` and ``docs/adding-a-method.md``.
"""

from __future__ import annotations

from bayesflow.methods.base import Method, Traits
from bayesflow.methods.registry import METHODS, method_of, traits_of

__all__ = ["METHODS", "Method", "Traits", "method_of", "traits_of"]
