"""The method registry: every module of :mod:`bayesflow.methods` that declares ``METHODS``.

Discovery walks the package (``pkgutil``), so adding a method is one module plus a row
of the conformance table; no other file lists methods. Discovery is torch-free: method
modules import torch inside their ``build`` functions only.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from bayesflow.errors import RegistryError
from bayesflow.methods.base import Method, Traits
from bayesflow.registry import closest

__all__ = ["METHODS", "MethodRegistry", "method_of", "methods_with_curvature", "traits_of"]

# Modules of the package that hold shared pieces, not methods.
_NOT_METHODS = frozenset({"base", "registry"})


class MethodRegistry:
    """The methods found in :mod:`bayesflow.methods`, by ``engine:`` name."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] | None = None

    def _load(self) -> dict[str, Method]:
        if self._methods is None:
            self._methods = _discover()
        return self._methods

    def get(self, name: str) -> Method:
        """The method registered under ``name``, or a RegistryError naming a close match."""
        methods = self._load()
        if name not in methods:
            hint = closest(name, sorted(methods))
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            raise RegistryError(
                f"unknown engine {name!r}{suggestion} (expected one of: {', '.join(sorted(methods))})"
            )
        return methods[name]

    def names(self) -> list[str]:
        """Every method name, sorted."""
        return sorted(self._load())

    def spec_classes(self) -> tuple[type[Any], ...]:
        """The distinct spec classes, in name order (the members of the spec union)."""
        seen: dict[type[Any], None] = {}
        for name in self.names():
            seen.setdefault(self._load()[name].spec, None)
        return tuple(seen)

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def __iter__(self) -> Iterator[Method]:
        methods = self._load()
        return iter(methods[name] for name in sorted(methods))

    def __len__(self) -> int:
        return len(self._load())


@lru_cache(maxsize=1)
def _package_modules() -> tuple[str, ...]:
    package = __name__.rpartition(".")[0]
    return tuple(
        f"{package}.{info.name}"
        for info in pkgutil.iter_modules([str(Path(__file__).parent)])
        if info.name not in _NOT_METHODS and not info.name.startswith("_")
    )


def _discover() -> dict[str, Method]:
    found: dict[str, Method] = {}
    for module_name in _package_modules():
        module = importlib.import_module(module_name)
        for method in getattr(module, "METHODS", ()):
            if method.name in found:
                raise RuntimeError(
                    f"method {method.name!r} is declared by {found[method.name].module} and "
                    f"{module_name}; rename one"
                )
            engine_field = method.spec.model_fields.get("engine")
            allowed = getattr(engine_field.annotation, "__args__", ()) if engine_field else ()
            if method.name not in allowed:
                raise RuntimeError(
                    f"{module_name}: the spec class {method.spec.__name__} of method "
                    f"{method.name!r} must declare engine: Literal[{method.name!r}, ...]"
                )
            found[method.name] = Method(
                method.name, method.spec, method.traits, method.build, method.label, module_name
            )
    return found


METHODS = MethodRegistry()


def method_of(config: Any) -> Method:
    """The method of a method's spec (``config.engine``) or of an engine name."""
    return METHODS.get(config if isinstance(config, str) else config.engine)


def traits_of(config: Any) -> Traits:
    """The traits of a method's spec or engine name."""
    return method_of(config).traits


def methods_with_curvature(curvature: str) -> str:
    """The registered methods whose curvature pass is ``curvature``, as ``a or b`` for a
    message (modules outside :mod:`bayesflow.methods` name methods only through this)."""
    return " or ".join(method.name for method in METHODS if method.traits.curvature == curvature)
