"""Turn pydantic validation errors into messages a spec author can act on.

Each message names the location (file:line:column, the override, or the base spec it was
inherited from), the key path as written in the spec (``methods.vi.optimizer.lr``:
pydantic's discriminator tags are dropped), what was expected, what was found, and for a
misspelt key or name the closest valid one.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from bayesflow.registry import closest
from bayesflow.spec.locations import Location
from bayesflow.spec.models import WorkflowSpec

__all__ = [
    "allowed_keys",
    "format_cross_problems",
    "format_validation_error",
    "nearest_location",
    "shown_key",
    "union_members",
]

# What a discriminated section's `name` (or a method's `engine`) picks, for messages.
NOUNS = {"data": "dataset", "model": "model", "likelihood": "likelihood", "prior": "prior",
         "methods": "engine", "plots": "plot"}

# Pydantic error types and what the key expected, in the spec's words.
EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def union_members(annotation: Any) -> list[Any]:
    """The members of a (possibly annotated, possibly nested) union, flattened."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return union_members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in union_members(arg)]
    return [annotation]


def _models(annotation: Any) -> list[type[BaseModel]]:
    return [m for m in union_members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]


def _tags(model: type[BaseModel]) -> tuple[str, ...]:
    """The discriminator values (``name`` or ``engine``) a spec model accepts."""
    for key in ("engine", "name"):
        field = model.model_fields.get(key)
        if field is not None and get_origin(field.annotation) is typing.Literal:
            return tuple(str(tag) for tag in get_args(field.annotation))
    return ()


def _field(model: type[BaseModel], key: Any) -> Any:
    """The annotation of ``key`` (a field name or alias) in ``model``, or None."""
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.annotation
    return None


def _container_item(annotation: Any) -> Any:
    for member in union_members(annotation):
        if get_origin(member) in (list, dict):
            return get_args(member)[-1]
    return None


def _spec_path(loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The key path of pydantic's ``loc``: discriminator tags and union labels dropped."""
    path: list[str] = []
    annotation: Any = WorkflowSpec
    for part in loc:
        models = _models(annotation)
        chosen = [model for model in models if part in _tags(model)] if len(models) > 1 else []
        if chosen:  # a discriminated union: ``part`` is the tag pydantic adds to loc
            annotation = chosen[0]
            continue
        item = _container_item(annotation) if annotation is not None else None
        if len(models) == 1:
            annotation = _field(models[0], part)
        elif item is not None:
            annotation = item
        elif annotation is not None and not models and isinstance(part, str) and part != "[key]":
            continue  # a label of a union of plain types (`int | None`), not a key
        else:
            annotation = None
        path.append(str(part))
    return tuple(path)


def _model_at(path: tuple[str, ...], data: Any) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at ``path`` (following unions)."""
    annotation: Any = WorkflowSpec
    node = data
    for part in path:
        model = _pick(annotation, node)
        if model is not None:
            annotation = _field(model, part)
            if annotation is None:
                return None
        else:
            annotation = _container_item(annotation)
            if annotation is None:
                return None
        node = node.get(part) if isinstance(node, dict) else None
    return _pick(annotation, node)


def _pick(annotation: Any, node: Any) -> type[BaseModel] | None:
    models = _models(annotation)
    if len(models) == 1:
        return models[0]
    for model in models:
        for key in ("engine", "name"):
            if isinstance(node, dict) and isinstance(node.get(key), str) and node[key] in _tags(model):
                return model
    return None


def allowed_keys(path: tuple[str, ...], data: Any) -> list[str]:
    """The keys the spec accepts at the mapping ``path`` (empty when unknown)."""
    model = _model_at(path, data)
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _found(value: Any) -> str:
    """What was found, as the spec author wrote it (YAML's ``null``, ``true``)."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quoted(text: str) -> list[str]:
    """The quoted items of pydantic's ``'a', 'b' or 'c'``."""
    return re.findall(r"'([^']*)'", text)


def _unknown_tag(error: dict[str, Any], path: tuple[str, ...]) -> str:
    context = error.get("ctx", {})
    field = str(context.get("discriminator", "")).strip("'")
    expected = _quoted(str(context.get("expected_tags", "")))
    if error["type"] == "union_tag_not_found":
        return f"missing `{field}`; add one of: {', '.join(expected or _expected_tags(path))}"
    tag = error["input"].get(field) if isinstance(error["input"], dict) else context.get("tag")
    noun = NOUNS.get(path[0], "name") if path else "name"
    hint = closest(str(tag), expected)
    suggestion = f"; did you mean {hint!r}?" if hint else ""
    return f"unknown {noun} {_found(tag)}{suggestion} (expected one of: {', '.join(expected)})"


def _expected_tags(path: tuple[str, ...]) -> list[str]:
    """Every discriminator value of the union at ``path`` (for a missing ``engine``)."""
    annotation: Any = WorkflowSpec
    for part in path:
        models = _models(annotation)
        annotation = _field(models[0], part) if len(models) == 1 else _container_item(annotation)
    return [tag for model in _models(annotation) for tag in _tags(model)]


def _literal(error: dict[str, Any], path: tuple[str, ...]) -> str:
    expected = _quoted(str(error.get("ctx", {}).get("expected", "")))
    found = error.get("input")
    hint = closest(found, expected) if isinstance(found, str) else None
    suggestion = f"; did you mean {hint!r}?" if hint else ""
    if path and path[0] == "plots":
        return f"unknown plot {_found(found)}{suggestion} (expected one of: {', '.join(expected)})"
    return f"expected one of: {', '.join(expected)}, got {_found(found)}{suggestion}"


# A key is shown at most this long: a spec may be 256 KiB, a message should not.
MAX_KEY_SHOWN = 60


def shown_key(key: object) -> str:
    """A key as a message shows it: characters that do not print (controls, the
    right-to-left override that reorders what a terminal shows) escaped as ``\\u202e``,
    and cut to :data:`MAX_KEY_SHOWN` characters."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(key))
    return text if len(text) <= MAX_KEY_SHOWN else text[: MAX_KEY_SHOWN - 1] + "…"


def _describe(error: dict[str, Any], path: tuple[str, ...], data: Any) -> str:
    kind, context = error["type"], error.get("ctx", {})
    found = _found(error.get("input"))
    if kind == "extra_forbidden":
        options = allowed_keys(path[:-1], data)
        hint = closest(path[-1], options)
        suggestion = f"; did you mean `{hint}`?" if hint else ""
        listed = f" (allowed: {', '.join(options)})" if options else ""
        return f"unknown key `{shown_key(path[-1])}`{suggestion}{listed}"
    if kind == "missing":
        return f"required key `{path[-1]}` is missing; add it" if path else "required key is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return _unknown_tag(error, path)
    if kind == "literal_error":
        return _literal(error, path)
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if kind in EXPECTED:
        return f"expected {EXPECTED[kind]}, got {found}"
    if kind == "too_short":
        count = context.get("min_length", 1)
        return f"expected at least {count} item{'s' if count != 1 else ''}, got {found}"
    if kind == "string_pattern_mismatch":
        return f"expected a string matching {context.get('pattern')!r}, got {found}"
    if kind == "invalid_key":
        return f"keys are strings, got the key {found}; quote it or rename it"
    return f"expected {_expected(str(error['msg']))}, got {found}"


def _expected(message: str) -> str:
    """Rephrase pydantic's "Input should be ..." as what the key expects."""
    message = re.sub(r"^Input should be ", "", message)
    message = re.sub(r"^(greater|less) than", r"a value \1 than", message)
    message = message.replace("a valid ", "a ")
    return message[0].lower() + message[1:] if message else message


def _location_path(error: dict[str, Any], path: tuple[str, ...]) -> tuple[str, ...]:
    """Where to point: a bad ``name``/``engine`` points at that key, not its section."""
    if error["type"] == "union_tag_invalid":
        field = str(error.get("ctx", {}).get("discriminator", "")).strip("'")
        return (*path, field)
    return path


def format_validation_error(
    exc: ValidationError,
    data: Any,
    locations: dict[tuple[str, ...], Location],
    source: str,
) -> list[str]:
    """One message per validation error, with its location and fix."""
    problems = []
    for details in exc.errors():
        error: dict[str, Any] = dict(details)
        path = _spec_path(error["loc"])
        if error["type"] == "invalid_key" or error["loc"][-1:] == ("[key]",):
            error = {**error, "type": "invalid_key"}  # loc ends with the key itself
            path = path[:-1]
        shown = _location_path(error, path)
        where = nearest_location(shown, locations) or Location(source)
        key = ".".join(map(shown_key, shown)) or "(top level)"
        problems.append(f"{where}: {key}: {_describe(error, path, data)}")
    return problems


def format_cross_problems(
    problems: list[tuple[tuple[str, ...], str]],
    locations: dict[tuple[str, ...], Location],
    source: str,
) -> list[str]:
    """Format cross-field problems like validation errors: location, key path, message."""
    return [
        f"{nearest_location(path, locations) or Location(source)}: {'.'.join(map(str, path))}: {message}"
        for path, message in problems
    ]


def nearest_location(
    path: tuple[str, ...], locations: dict[tuple[str, ...], Location]
) -> Location | None:
    """The location of ``path`` or of its closest ancestor that has one."""
    for length in range(len(path), -1, -1):
        if path[:length] in locations:
            return locations[path[:length]]
    return None
