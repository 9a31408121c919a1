"""What a spec can name, read from the pydantic models themselves (torch-free).

``bayesflow engines`` (and ``models``, ``datasets``, ``likelihoods``, ``priors``,
``plots``) and the generated reference ``docs/spec.md`` both come from here, so the
listing, the documentation and the validation cannot disagree. Each entry is one member
of a discriminated union: its registry names, the first paragraph of its docstring, and
its parameters (nested settings flattened to dotted keys) with type, default and
description.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from bayesflow.spec.blocks import DataSpec, LikelihoodSpec, ModelSpec, PriorSpec
from bayesflow.spec.errors import union_members
from bayesflow.spec.methods import MethodSpec
from bayesflow.spec.settings import PLOTS

__all__ = [
    "KINDS", "Entry", "Parameter", "entries", "parameters", "plot_entries", "render_default",
    "render_type", "summary",
]

# What each listing command shows: the union of spec models, the key naming a member, and
# where in a spec it goes.
KINDS: dict[str, tuple[Any, str, str]] = {
    "datasets": (DataSpec, "name", "data"),
    "models": (ModelSpec, "name", "model"),
    "likelihoods": (LikelihoodSpec, "name", "likelihood"),
    "priors": (PriorSpec, "name", "prior"),
    "engines": (MethodSpec, "engine", "methods.<name>"),
}


@dataclass(frozen=True)
class Parameter:
    """One key of a spec model: dotted key, type, default and description."""

    key: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Entry:
    """One member of a discriminated union: the names it answers to and its keys."""

    names: tuple[str, ...]
    summary: str
    model: type[BaseModel]
    parameters: tuple[Parameter, ...]


def summary(model: type[BaseModel], whole: bool = False) -> str:
    """The first paragraph of a model's docstring (``whole``: all of it), on one line."""
    doc = inspect.getdoc(model) or ""
    text = " ".join((doc if whole else doc.split("\n\n")[0]).split())
    return text.replace("``", "`")  # reStructuredText literals read as Markdown code


def _constraints(metadata: list[Any]) -> list[str]:
    """Bounds as ``> 0``, ``≥ 0`` or an interval ``in [0, 1)``; lengths and patterns in words."""
    lower: tuple[str, str, Any] = ("", "", None)
    upper: tuple[str, str, Any] = ("", "", None)
    words = []
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            lower = ("(", "> ", item.gt)
        elif isinstance(item, annotated_types.Ge):
            lower = ("[", "≥ ", item.ge)
        elif isinstance(item, annotated_types.Lt):
            upper = (")", "< ", item.lt)
        elif isinstance(item, annotated_types.Le):
            upper = ("]", "≤ ", item.le)
        elif isinstance(item, (annotated_types.MinLen, annotated_types.MaxLen)):
            continue  # lengths: see _length
        elif getattr(item, "pattern", None):
            words.append(f"matching `{item.pattern}`")
    if lower[1] and upper[1]:
        words.insert(0, f"in {lower[0]}{lower[2]}, {upper[2]}{upper[0]}")
    else:
        words[:0] = [f"{sign}{value}" for _, sign, value in (lower, upper) if sign]
    return words


PLAIN = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _length(metadata: list[Any]) -> str:
    """`` (at least 1 item)``, `` (3 items)``: the length bounds of a list, or ``""``."""
    least = next((m.min_length for m in metadata if isinstance(m, annotated_types.MinLen)), None)
    most = next((m.max_length for m in metadata if isinstance(m, annotated_types.MaxLen)), None)
    if least is None and most is None:
        return ""
    if least == most:
        text = f"{least} items"
    elif most is None:
        text = f"at least {least} item{'s' if least != 1 else ''}"
    elif least is None:
        text = f"at most {most} items"
    else:
        text = f"{least} to {most} items"
    return f" ({text})"


def render_type(annotation: Any, metadata: list[Any] | None = None) -> str:
    """A short reading of a field's type: ``integer > 0``, ``list of number ≥ 0``."""
    origin = get_origin(annotation)
    metadata = list(metadata or [])
    constraints = _constraints(metadata)
    if origin is typing.Annotated:
        inner, *extra = get_args(annotation)
        text = render_type(inner, extra)
    elif origin is Literal:
        text = "one of: " + ", ".join(str(value) for value in get_args(annotation))
    elif origin is list:
        text = f"list{_length(metadata)} of {render_type(get_args(annotation)[0])}"
    elif origin is dict:
        key, value = get_args(annotation)
        text = f"mapping{_length(metadata)} of {render_type(key)} to {render_type(value)}"
    elif len(members := union_members(annotation)) > 1:
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if models:
            return f"mapping chosen by `{_tag(models[0])}`"
        # Field-level bounds (a list's length) belong to the member that is not null.
        text = " or ".join(
            render_type(member, metadata if member is not type(None) else None)
            for member in get_args(annotation)
        )
        return text
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = "mapping"
    else:
        text = PLAIN.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return " ".join([text, *constraints]) if constraints else text


def render_default(field: FieldInfo) -> str:
    """The default as YAML would write it (``[64]``, ``true``, ``null``), or ``required``."""
    if field.is_required():
        return "required"
    return _yaml(field.get_default(call_default_factory=True))


def _yaml(value: Any) -> str:
    """A default as YAML writes it in flow style (a settings model as its mapping)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.removesuffix("\n...\n").strip()


def _tag(model: type[BaseModel]) -> str:
    """The key that picks ``model`` out of its union: ``engine`` or ``name``."""
    return "engine" if "engine" in model.model_fields else "name"


def _names(model: type[BaseModel]) -> tuple[str, ...]:
    for key in ("engine", "name"):
        field = model.model_fields.get(key)
        if field is not None and get_origin(field.annotation) is Literal:
            return tuple(str(value) for value in get_args(field.annotation))
    return ()


def _single_model(annotation: Any) -> type[BaseModel] | None:
    members = [m for m in union_members(annotation) if m is not type(None)]
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], BaseModel):
        return members[0]
    return None


def parameters(model: type[BaseModel], prefix: str = "", skip: tuple[str, ...] = ()) -> list[Parameter]:
    """Every key of ``model``; a nested settings model is flattened (``optimizer.lr``)."""
    found = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        key = prefix + (field.alias or name)
        nested = _single_model(field.annotation)
        if nested is not None:
            # A method may redeclare a nested setting with its own default (a sampler whose
            # schedule defaults to cyclical): list that default, not the nested class's.
            default = field.get_default(call_default_factory=True)
            found += [
                _with_default(parameter, default, parameter.key.removeprefix(key + "."))
                for parameter in parameters(nested, key + ".")
            ]
            continue
        found.append(Parameter(
            key, render_type(field.annotation, field.metadata), render_default(field),
            " ".join((field.description or "").split()),
        ))
    return found


def _with_default(parameter: Parameter, default: Any, name: str) -> Parameter:
    """``parameter`` with its default read from the enclosing field's default model."""
    value: Any = default
    for part in name.split("."):
        value = getattr(value, part, None) if isinstance(value, BaseModel) else None
        if value is None:
            return parameter
    return Parameter(parameter.key, parameter.type, _yaml(value), parameter.description)


def entries(kind: str) -> list[Entry]:
    """The members of the union a listing command shows (see :data:`KINDS`)."""
    union, tag, _ = KINDS[kind]
    members = [m for m in union_members(union) if isinstance(m, type) and issubclass(m, BaseModel)]
    return [
        Entry(_names(model), summary(model), model, tuple(parameters(model, skip=(tag,))))
        for model in members
    ]


METRIC_WORDS = {"nll": "test NLL", "accuracy": "test accuracy", "ece": "test ECE",
                "brier": "test Brier score", "rmse": "test RMSE",
                "coverage": "predictive interval coverage"}


def plot_entries() -> list[tuple[str, str]]:
    """The plots a spec may list (``plots:``), each with what it draws."""
    found = []
    for name in PLOTS:
        metric, _, axis = name.partition("_vs_")
        found.append((name, f"{METRIC_WORDS.get(metric, metric)} against the {axis}, by method"))
    return found
