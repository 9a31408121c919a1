"""A Hypothesis strategy for the instances of a JSON Schema, as pydantic writes them.

Covers what ``WorkflowSpec.model_json_schema()`` uses: ``$ref`` into ``$defs``, ``const``,
``enum``, ``anyOf``/``oneOf``/``allOf``, objects with ``properties``, ``required`` and
``additionalProperties``, strings with a ``pattern`` or a length, bounded integers and
numbers, booleans, null and arrays. (hypothesis-jsonschema would do this, but its last
release does not run on current Hypothesis.)
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

__all__ = ["from_schema"]

# Unbounded numbers are drawn from a range wide enough to reach absurd but typeable values.
WIDE = 10**7
KEYS = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)


def from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Instances of ``schema``; ``root`` holds the ``$defs`` its references point into."""
    root = schema if root is None else root
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: from_schema(root["$defs"][name], root))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(member, root) for member in schema[key]])
    if "allOf" in schema:
        return from_schema({**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": each}, root) for each in kind])
    return _TYPES.get(kind, _anything)(schema, root)


def _object(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        return st.fixed_dictionaries(
            {key: from_schema(value, root) for key, value in properties.items() if key in required},
            optional={key: from_schema(value, root) for key, value in properties.items() if key not in required},
        )
    extra = schema.get("additionalProperties", {})
    values = from_schema(extra, root) if isinstance(extra, dict) else _anything(schema, root)
    least = schema.get("minProperties", 0)
    return st.dictionaries(KEYS, values, min_size=least, max_size=max(least, 3))


def _string(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    longest = schema.get("maxLength", 40)
    if "pattern" in schema:
        return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda text: len(text) <= longest)
    return st.text(min_size=schema.get("minLength", 0), max_size=min(longest, 40))


def _integer(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    low = schema.get("minimum", -WIDE)
    high = schema.get("maximum", WIDE)
    if "exclusiveMinimum" in schema:
        low = int(schema["exclusiveMinimum"]) + 1
    if "exclusiveMaximum" in schema:
        high = int(schema["exclusiveMaximum"]) - 1
    return st.integers(int(low), int(high))


def _number(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.floats(
        min_value=schema.get("minimum", schema.get("exclusiveMinimum", -WIDE)),
        max_value=schema.get("maximum", schema.get("exclusiveMaximum", WIDE)),
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
        allow_nan=False,
        allow_infinity=False,
    )


def _array(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    least = schema.get("minItems", 0)
    most = min(schema.get("maxItems", least + 3), least + 3)
    return st.lists(from_schema(schema.get("items", {}), root), min_size=least, max_size=most)


def _anything(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=5))


_TYPES = {
    "object": _object,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda schema, root: st.booleans(),
    "null": lambda schema, root: st.none(),
    "array": _array,
}
