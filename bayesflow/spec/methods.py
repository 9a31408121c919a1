"""The ``methods:`` entries of a spec: a union of every method's spec class (torch-free).

The members come from the method registry (:mod:`bayesflow.methods`), discriminated by
``engine``; each method module owns its spec class, so this module names no method.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from bayesflow.methods.registry import METHODS

__all__ = ["MethodSpec"]

MethodSpec: Any = Annotated[
    Union[METHODS.spec_classes()],  # type: ignore[valid-type]  # built from the registry
    Field(discriminator="engine"),
]
