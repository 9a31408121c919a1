"""Turn pydantic validation errors into messages a spec author can act on.

Each message names the location (file:line:column), the key path as written in the spec
(``methods.vi.optimizer.lr``: pydantic's discriminator tags are dropped), what was
expected, what was found, and for a misspelt key or name the closest valid one.
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

__all__ = ["allowed_keys", "format_cross_problems", "format_validation_error"]


def _spec_path(loc: tuple[Any, ...], data: Any) -> tuple[str, ...]:
    """Drop the parts of pydantic's ``loc`` that are not keys of ``data`` (union tags)."""
    path: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(str(part))
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not path_is_tag(part, node):
            path.append(part)  # a missing or extra key: keep it, it is what the user wrote
            node = None
    return tuple(path)


def path_is_tag(part: str, node: dict[str, Any]) -> bool:
    """Whether ``part`` is a discriminator value (``vi_diag``) rather than a key."""
    return any(node.get(key) == part for key in ("engine", "name"))


def _model_at(path: tuple[str, ...], data: Any) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at ``path`` (following unions)."""
    annotation: Any = WorkflowSpec
    node = data
    for part in path:
        model = _pick(annotation, node)
        if model is not None:
            if part not in model.model_fields:
                return None
            annotation = model.model_fields[part].annotation
        else:
            annotation = _container_item(annotation)
            if annotation is None:
                return None
        node = node.get(part) if isinstance(node, dict) else None
    return _pick(annotation, node)


def _unwrap(annotation: Any) -> list[Any]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _unwrap(arg)]
    return [annotation]


def _pick(annotation: Any, node: Any) -> type[BaseModel] | None:
    models = [m for m in _unwrap(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    if len(models) == 1:
        return models[0]
    for model in models:
        for key in ("engine", "name"):
            field = model.model_fields.get(key)
            if field is not None and isinstance(node, dict) and node.get(key) in get_args(field.annotation):
                return model
    return None


def _container_item(annotation: Any) -> Any:
    for member in _unwrap(annotation):
        origin = get_origin(member)
        if origin in (list, dict):
            return get_args(member)[-1]
    return None


def allowed_keys(path: tuple[str, ...], data: Any) -> list[str]:
    """The keys the spec accepts at the mapping ``path`` (empty when unknown)."""
    model = _model_at(path, data)
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(error: dict[str, Any], path: tuple[str, ...], data: Any) -> str:
    kind, context = error["type"], error.get("ctx", {})
    if kind == "extra_forbidden":
        options = allowed_keys(path[:-1], data)
        hint = closest(path[-1], options)
        suggestion = f"; did you mean `{hint}`?" if hint else ""
        listed = f" (allowed: {', '.join(options)})" if options else ""
        return f"unknown key `{path[-1]}`{suggestion}{listed}"
    if kind == "missing":
        return "required key is missing; add it"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        expected = [tag.strip(" '") for tag in str(context.get("expected_tags", "")).split(",")]
        tag = context.get("tag", "")
        field = context.get("discriminator", "").strip("'")
        if kind == "union_tag_not_found":
            return f"missing `{field}`; expected one of: {', '.join(expected)}"
        hint = closest(str(tag), expected)
        suggestion = f"; did you mean {hint!r}?" if hint else ""
        noun = "engine" if field == "engine" else "name"
        return f"unknown {noun} {tag!r}{suggestion} (expected one of: {', '.join(expected)})"
    message = error["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        return message
    return f"expected {_expected(message)}, got {_found(error.get('input'))}"


def _expected(message: str) -> str:
    """Rephrase pydantic's "Input should be ..." as what the key expects."""
    message = re.sub(r"^Input should be ", "", message)
    message = re.sub(r"^(greater|less) than", r"a value \1 than", message)
    message = re.sub(r"^List should have at least (\d+) items? after validation, not \d+",
                     r"a list of at least \1 item(s)", message)
    message = message.replace("a valid ", "a ")
    return message[0].lower() + message[1:] if message else message


def format_validation_error(
    exc: ValidationError,
    data: Any,
    locations: dict[tuple[str, ...], Location],
    source: str,
) -> list[str]:
    """One message per validation error, with its location and fix."""
    problems = []
    for error in exc.errors():
        path = _spec_path(error["loc"], data)
        where = _nearest(path, locations) or Location(source)
        key = ".".join(path) or "(top level)"
        problems.append(f"{where}: {key}: {_describe(error, path, data)}")
    return problems


def format_cross_problems(
    problems: list[tuple[tuple[str, ...], str]],
    locations: dict[tuple[str, ...], Location],
    source: str,
) -> list[str]:
    """Format cross-field problems like validation errors: location, key path, message."""
    return [
        f"{_nearest(path, locations) or Location(source)}: {'.'.join(path)}: {message}"
        for path, message in problems
    ]


def _nearest(path: tuple[str, ...], locations: dict[tuple[str, ...], Location]) -> Location | None:
    """The location of ``path`` or of its closest ancestor that has one."""
    for length in range(len(path), -1, -1):
        if path[:length] in locations:
            return locations[path[:length]]
    return None
