"""The `llm` extra: transformers and peft, imported only when a language model is built."""

from __future__ import annotations

from types import ModuleType

from bayesflow.errors import SpecError

__all__ = ["INSTALL", "require"]

INSTALL = "pip install 'bayesflow-workflows[llm]'"


def require(name: str, where: str = "model") -> ModuleType:
    """Import ``transformers`` or ``peft``, or raise a :class:`SpecError` naming the extra.

    Args:
        name: the module to import.
        where: the spec key that needs it, for the message.
    """
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise SpecError(
            f"{where}: a causal language model needs `{name}`, from the optional `llm` extra; "
            f"install it with `{INSTALL}`"
        ) from exc
