"""Hydra-style command-line overrides: ``key.path=value`` and ``+key.path=value``.

Values are parsed as safe YAML (``temperatures=[0.1,1]`` is a list, ``epochs=5`` an int). An
override of a key the spec does not have is an error with a suggestion, unless it is
added explicitly with a leading ``+``. Each overridden leaf's location becomes the override.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from bayesflow.errors import SpecError
from bayesflow.registry import closest
from bayesflow.spec.locations import Location, YamlProblem, parse_yaml

__all__ = ["apply_overrides", "parse_override"]


def parse_override(text: str) -> tuple[str, Any, bool]:
    """Split ``[+]key=value`` into key, parsed value, and whether it adds a key."""
    adding = text.startswith("+")
    body = text[1:] if adding else text
    if "=" not in body or not body.split("=", 1)[0].strip():
        raise SpecError(
            f"override {text!r}: expected `key.path=value` (or `+key.path=value` to add a key)"
        )
    key, raw = body.split("=", 1)
    try:  # the same safe parser as spec files: no tags, no alias bombs
        value = parse_yaml(raw, "override").data if raw.strip() else ""
    except YamlProblem as exc:
        message = exc.message.removeprefix("YAML syntax error: ")
        raise SpecError(f"override {text!r}: the value is not valid YAML: {message}") from None
    return key.strip(), value, adding


def _missing_part(config: DictConfig, key: str) -> tuple[str, list[str]] | None:
    """Return the first missing segment of ``key`` and its siblings, or None if present."""
    node: Any = config
    for index, part in enumerate(key.split(".")):
        if isinstance(node, ListConfig) and part.isdigit() and int(part) < len(node):
            node = node._get_node(int(part))
            continue
        if not isinstance(node, DictConfig) or part not in node:
            options = list(node.keys()) if isinstance(node, DictConfig) else []
            return ".".join(key.split(".")[: index + 1]), [str(option) for option in options]
        node = node._get_node(part)
    return None


def _schema_keys(config: DictConfig, dotted: str) -> list[str]:
    """Keys the spec's models accept in the mapping that holds ``dotted``."""
    from bayesflow.spec.errors import allowed_keys

    data = OmegaConf.to_container(config, resolve=False)
    return allowed_keys(tuple(dotted.split(".")[:-1]), data)


def _in_schema(config: DictConfig, key: str) -> bool:
    """Whether ``key`` is a field the spec accepts though the file leaves it at its default."""
    return key.split(".")[-1] in _schema_keys(config, key)


def apply_overrides(
    config: DictConfig,
    overrides: list[str],
    locations: dict[tuple[str, ...], Location],
    source: str,
) -> None:
    """Apply ``overrides`` to ``config`` in place, recording their locations."""
    problems: list[str] = []
    for text in overrides:
        try:
            key, value, adding = parse_override(text)
        except SpecError as exc:
            problems.extend(exc.problems)
            continue
        missing = _missing_part(config, key)
        if missing is not None and not adding and not _in_schema(config, key):
            part, options = missing
            options = sorted(set(options) | set(_schema_keys(config, part)))
            hint = closest(part.split(".")[-1], options)
            suggestion = f"; did you mean `{part.rsplit('.', 1)[0] + '.' if '.' in part else ''}{hint}`?" if hint else ""
            problems.append(
                f"override {text!r}: the spec has no key `{part}`{suggestion} "
                f"(to add a new key, write `+{text}`)"
            )
            continue
        OmegaConf.update(config, key, value, merge=False, force_add=True)
        path = tuple(key.split("."))
        for existing in [p for p in locations if p[: len(path)] == path]:
            del locations[existing]
        locations[path] = Location(f"override {text!r}")
    if problems:
        raise SpecError(problems, source)
