"""Registries map the names a spec uses to the code that builds them.

A YAML spec names engines, models, datasets, likelihoods, priors and plots by registry
key, never by import path. Each registry entry keeps its builder and a one-line summary,
so ``bayesflow engines`` (and friends) can list what is available.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bayesflow.errors import RegistryError

__all__ = ["Entry", "Registry", "closest"]

T = TypeVar("T", bound=Callable[..., Any])


def closest(name: str, options: list[str] | tuple[str, ...]) -> str | None:
    """Return the option closest to ``name``, or None when nothing is close."""
    matches = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered builder."""

    name: str
    builder: T
    summary: str

    def parameters(self) -> dict[str, Any]:
        """The builder's keyword parameters and their defaults (``...`` when required)."""
        out: dict[str, Any] = {}
        for param in inspect.signature(self.builder).parameters.values():
            if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            out[param.name] = ... if param.default is param.empty else param.default
        return out


class Registry(Generic[T]):
    """A name → builder mapping with helpful lookup errors.

    Args:
        kind: what the registry holds, singular ("engine"), used in messages.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, summary: str = "") -> Callable[[T], T]:
        """Decorator that registers ``builder`` under ``name``."""

        def decorate(builder: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            doc = summary or (inspect.getdoc(builder) or "").split("\n")[0]
            self._entries[name] = Entry(name, builder, doc)
            return builder

        return decorate

    def get(self, name: str) -> T:
        """Return the builder registered under ``name``."""
        return self.entry(name).builder

    def entry(self, name: str) -> Entry[T]:
        """Return the entry registered under ``name`` or raise a RegistryError."""
        try:
            return self._entries[name]
        except KeyError:
            hint = closest(name, self.names())
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            raise RegistryError(
                f"unknown {self.kind} {name!r}{suggestion} "
                f"(expected one of: {', '.join(self.names())})"
            ) from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._entries)
