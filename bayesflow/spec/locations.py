"""Safe YAML parsing that remembers where every key and value came from.

PyYAML's composer gives each node a start mark; walking the node tree yields a map from
key paths (``("methods", "vi", "epochs")``) to ``(line, column)``, both 1-based. The
same walk refuses what a workflow spec never needs and an attacker might send: tags that
would construct Python objects, duplicate keys, and alias expansions that blow up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["MAX_DEPTH", "MAX_EVENTS", "MAX_NODES", "Located", "Location", "YamlProblem", "parse_yaml", "syntax_message"]

# A hand-written spec has hundreds of nodes; a "billion laughs" document expands to
# billions. Counting expanded nodes before constructing anything bounds memory.
MAX_NODES = 200_000
# Before expansion: a spec has a few hundred YAML events and a nesting depth under ten.
MAX_EVENTS = 20_000
MAX_DEPTH = 100
_STRING = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
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
        if depth > MAX_DEPTH:
            raise YamlProblem(
                f"nesting deeper than {MAX_DEPTH} levels; a workflow spec is far shallower",
                _mark(source, current),
            )
        if id(current) in memo:
            return memo[id(current)]
        if current.tag == _TIMESTAMP and isinstance(current, ScalarNode) and current.style is None:
            current.tag = _STRING  # an unquoted date: keep the text the author wrote
        if current.tag == _MERGE:
            raise YamlProblem(
                "YAML merge keys (`<<`) are not supported in a workflow spec; "
                "use `extends: base.yaml`, or write the keys out",
                _mark(source, current),
            )
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


def syntax_message(exc: yaml.MarkedYAMLError) -> str:
    """Say what PyYAML's syntax error means for a spec author, and how to fix it."""
    problem = str(exc.problem or "invalid YAML")
    context = exc.context_mark
    opened = f" at line {context.line + 1}, column {context.column + 1}" if context else ""
    if "'\\t'" in problem:
        return "a tab character; YAML indents with spaces, never tabs: replace the tab with spaces"
    if problem.startswith("expected <block end>"):
        return (
            f"bad indentation: this line is not lined up with the keys of the mapping that "
            f"starts{opened}; keys of one mapping start in the same column (indent with spaces)"
        )
    if problem == "mapping values are not allowed here":
        return (
            "a `key: value` where none can start: indent it like its sibling keys, or quote "
            "a value that contains `: `"
        )
    flow = re.match(r"expected ',' or '([\]}])', but got (.*)", problem)
    if flow:
        bracket = "[" if flow.group(1) == "]" else "{"
        found = flow.group(2).replace("'<stream end>'", "the end of the file")
        return (
            f"unclosed `{bracket}` opened{opened}: expected `,` or `{flow.group(1)}`, "
            f"got {found}; close the bracket"
        )
    if problem.startswith("but found another document"):
        return "the file holds more than one YAML document (`---`); a spec is one document"
    if exc.context and "quoted scalar" in exc.context:
        return f"unclosed quote opened{opened}; close the string with the same quote"
    context_text = f" ({exc.context}{opened})" if exc.context else ""
    return f"{problem}{context_text}"


def _prescan(text: str, source: str) -> None:
    """Refuse documents too deep or too long before PyYAML's recursive composer sees them.

    The event parser is a state machine, so deep nesting cannot exhaust the stack here;
    stopping after ``MAX_EVENTS`` bounds the time spent on a file that is not a spec.
    """
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=yaml.SafeLoader)):
        if count > MAX_EVENTS:
            raise YamlProblem(
                f"the document has more than {MAX_EVENTS} YAML nodes; a workflow spec has "
                "a few hundred: is this the right file?",
                Location(source, event.start_mark.line + 1, event.start_mark.column + 1),
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlProblem(
                    f"nesting deeper than {MAX_DEPTH} levels; a workflow spec is far shallower",
                    Location(source, event.start_mark.line + 1, event.start_mark.column + 1),
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse_yaml(text: str, source: str) -> Located:
    """Parse ``text`` safely, returning data and the location of every key path.

    Raises:
        YamlProblem: on a syntax error, an unsafe tag, a duplicate key, a document too
            deep or too long, or an alias bomb.
    """
    try:
        _prescan(text, source)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(source, mark.line + 1, mark.column + 1) if mark else Location(source)
        raise YamlProblem(f"YAML syntax error: {syntax_message(exc)}", where) from None
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
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(source, mark.line + 1, mark.column + 1) if mark else Location(source)
        problem = str(exc.problem)
        if problem.startswith("found unhashable key"):
            problem = "a key is a list or a mapping; keys are plain names"
        raise YamlProblem(f"YAML error: {problem}", where) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(f"YAML error: {exc}", _mark(source, node)) from None
    finally:
        loader.dispose()
    return Located(data, locations)
