"""Safe YAML parsing that remembers where every key and value came from.

PyYAML's composer gives each node a start mark; walking the node tree yields a map from
key paths (``("methods", "vi", "epochs")``) to ``(line, column)``, both 1-based. The
same walk refuses what a workflow spec never needs and an attacker might send: tags that
would construct Python objects, duplicate keys, and alias expansions that blow up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["Located", "Location", "parse_yaml", "MAX_NODES"]

# A hand-written spec has hundreds of nodes; a "billion laughs" document expands to
# billions. Counting expanded nodes before constructing anything bounds memory.
MAX_NODES = 200_000
_SAFE_TAGS = {
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}

Path = tuple[str, ...]


@dataclass(frozen=True)
class Location:
    """Where a value came from: a file and line/column, or a command-line override."""

    source: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.source
        return f"{self.source}:{self.line}:{self.column}"


@dataclass
class Located:
    """Parsed YAML data plus the location of every key path in it."""

    data: Any
    locations: dict[Path, Location] = field(default_factory=dict)


class YamlProblem(Exception):
    """A YAML document could not be parsed safely; ``location`` says where."""

    def __init__(self, message: str, location: Location) -> None:
        super().__init__(message)
        self.message = message
        self.location = location


def _mark(source: str, node: Node) -> Location:
    return Location(source, node.start_mark.line + 1, node.start_mark.column + 1)


def _check(node: Node, source: str) -> None:
    """Refuse unsafe tags, duplicate keys and exploding aliases before construction."""
    memo: dict[int, int] = {}

    def size(current: Node, depth: int) -> int:
        if depth > 100:
            raise YamlProblem("nesting deeper than 100 levels", _mark(source, current))
        if id(current) in memo:
            return memo[id(current)]
        if current.tag not in _SAFE_TAGS:
            raise YamlProblem(
                f"the YAML tag {current.tag!r} is not allowed in a workflow spec "
                "(tags that construct objects are refused); remove it",
                _mark(source, current),
            )
        total = 1
        if isinstance(current, MappingNode):
            seen: dict[Any, Node] = {}
            for key, value in current.value:
                if isinstance(key, ScalarNode):
                    if key.value in seen:
                        first = _mark(source, seen[key.value])
                        raise YamlProblem(
                            f"duplicate key {key.value!r} (first defined at line {first.line}); "
                            "keep one of them",
                            _mark(source, key),
                        )
                    seen[key.value] = key
                total += size(key, depth + 1) + size(value, depth + 1)
        elif isinstance(current, SequenceNode):
            total += sum(size(item, depth + 1) for item in current.value)
        if total > MAX_NODES:
            raise YamlProblem(
                f"the document expands to more than {MAX_NODES} nodes (YAML aliases?); "
                "a workflow spec is far smaller",
                _mark(source, current),
            )
        memo[id(current)] = total
        return total

    size(node, 0)


def _record(node: Node, path: Path, source: str, locations: dict[Path, Location]) -> None:
    locations.setdefault(path, _mark(source, node))
    if isinstance(node, MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            locations[child] = _mark(source, key)
            _record(value, child, source, locations)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _record(item, (*path, str(index)), source, locations)


def parse_yaml(text: str, source: str) -> Located:
    """Parse ``text`` safely, returning data and the location of every key path.

    Raises:
        YamlProblem: on a syntax error, an unsafe tag, a duplicate key or an alias bomb.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(source, mark.line + 1, mark.column + 1) if mark else Location(source)
        problem = exc.problem or "invalid YAML"
        if "\t" in text and "tab" in str(problem).lower() or "found character '\\t'" in str(exc):
            problem += " (YAML indents with spaces, never tabs)"
        raise YamlProblem(f"YAML syntax error: {problem}", where) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"YAML error: {exc}", Location(source)) from None
    if node is None:
        return Located(None)
    _check(node, source)
    locations: dict[Path, Location] = {}
    _record(node, (), source, locations)
    loader = yaml.SafeLoader("")
    try:
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlProblem(f"YAML error: {exc}", _mark(source, node)) from None
    finally:
        loader.dispose()
    return Located(data, locations)
