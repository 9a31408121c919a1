"""OmegaConf interpolation (``${name}``) with every failure located at the key holding it.

An interpolation is checked twice: its grammar when the config is built (``${`` alone is
refused there) and its target when it is resolved (``${data.nope}`` points nowhere). Both
report every offending key at once, with its line and, for a target that does not
exist, the closest key that does.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

from bayesflow.errors import SpecError
from bayesflow.registry import closest
from bayesflow.spec.errors import nearest_location
from bayesflow.spec.locations import Location

__all__ = ["create_config", "resolve_config"]

Locations = dict[tuple[str, ...], Location]


def _strings(node: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """Every string value under ``node`` that holds an interpolation, with its key path."""
    if isinstance(node, dict):
        return [item for key, value in node.items() for item in _strings(value, (*path, str(key)))]
    if isinstance(node, list):
        return [item for index, value in enumerate(node) for item in _strings(value, (*path, str(index)))]
    return [(path, node)] if isinstance(node, str) and "${" in node else []


def _first_line(error: BaseException) -> str:
    return str(error).split("\n")[0]


def _located(path: tuple[str, ...], locations: Locations, source: str) -> str:
    where = nearest_location(path, locations) or Location(source)
    return f"{where}: {'.'.join(path) or '(top level)'}"


def _yaml_value(value: Any) -> str:
    """A key as YAML would print it (``true``, ``null``, ``1.5``)."""
    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def _odd_keys(node: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """Every key under ``node`` that is not a string (YAML reads `on:` as true, `~:` as null)."""
    found: list[tuple[tuple[str, ...], Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                found.append((path, key))
            found += _odd_keys(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _odd_keys(value, (*path, str(index)))
    return found


def create_config(data: dict[str, Any], locations: Locations, source: str) -> DictConfig:
    """An OmegaConf config of ``data``; every malformed interpolation is reported, located.

    Raises:
        SpecError: listing each key that is not a string and each value whose
            interpolation does not parse.
    """
    problems = [
        f"{_located((*path, _yaml_value(key)), locations, source)}: expected a string key, got "
        f"{_yaml_value(key)} (YAML reads unquoted numbers, true/false/yes/no/on/off and ~ as "
        "values, not names); quote the key"
        for path, key in _odd_keys(data, ())
    ]
    for path, text in _strings(data, ()):
        try:
            OmegaConf.create({"value": text})
        except OmegaConfBaseException as error:
            problems.append(
                f"{_located(path, locations, source)}: the interpolation in {text!r} does not "
                f"parse ({_first_line(error)}); write `${{key.path}}`, or escape a literal "
                "`${` as `\\${`"
            )
    if problems:
        raise SpecError(problems, source)
    try:
        return OmegaConf.create(data)
    except OmegaConfBaseException as error:
        full_key = getattr(error, "full_key", None)
        path = tuple(str(full_key).split(".")) if full_key else ()
        raise SpecError(f"{_located(path, locations, source)}: {_first_line(error)}", source) from None


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key path of a plain container, dotted (``data.name``, ``temperatures.0``)."""
    items: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    keys = []
    for key, value in items:
        dotted = f"{prefix}{key}"
        keys += [dotted, *_dotted_keys(value, dotted + ".")]
    return keys


def _message(error: OmegaConfBaseException, raw: Any, keys: list[str]) -> str:
    if isinstance(error, InterpolationKeyError):
        match = re.search(r"Interpolation key '([^']*)' not found", str(error))
        if match:
            missing = match.group(1)
            hint = closest(missing, keys)
            suggestion = f"; did you mean `{hint}`?" if hint else ""
            return f"the interpolation {raw!r} points nowhere: the spec has no key `{missing}`{suggestion}"
    return f"the interpolation {raw!r} failed: {_first_line(error)}"


def resolve_config(config: DictConfig, locations: Locations, source: str) -> dict[str, Any]:
    """Resolve every interpolation of ``config`` into a plain mapping.

    Raises:
        SpecError: listing every key whose interpolation fails, each with its location.
    """
    problems: list[str] = []
    unresolved = OmegaConf.to_container(config, resolve=False)
    keys = _dotted_keys(unresolved)

    def walk(node: DictConfig | ListConfig, raw: Any, path: tuple[str, ...]) -> None:
        keys_here: list[Any] = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
        for key in keys_here:
            child = (*path, str(key))
            try:
                value = node[key]
            except OmegaConfBaseException as error:
                problems.append(f"{_located(child, locations, source)}: {_message(error, raw[key], keys)}")
                continue
            # A resolved interpolation is checked where it points to, not walked again
            # (``${data}`` inside ``data`` would otherwise be walked forever).
            if OmegaConf.is_config(value) and not OmegaConf.is_interpolation(node, key):
                walk(value, raw[key], child)

    walk(config, unresolved, ())
    if problems:
        raise SpecError(problems, source)
    try:
        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as error:
        raise SpecError(f"{source}: resolving interpolations failed: {_first_line(error)}", source) from None
