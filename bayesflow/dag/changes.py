"""Why a planned stage is stale: what changed since it last finished, in the spec's words.

The cache's index keeps the config each stage last finished under; :func:`describe_change`
compares it with the stage's config now (``bayesflow plan`` shows the result).
"""

from __future__ import annotations

import json
from typing import Any

from bayesflow.dag.plan import Stage

__all__ = ["describe_change"]

# Where each part of a stage's config payload (built by plan_workflow) sits in a spec.
_SPEC_KEYS = {"convention": "temperature_convention", "device": "execution.device"}
_MISSING = object()
_SHOWN_CHANGES = 2
_SHOWN_VALUE = 24  # characters of a value shown; a reason stays one short line of `plan`'s table


def _leaves(payload: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """The payload flattened to key paths (lists are leaves: they change as a whole)."""
    if not isinstance(payload, dict) or not payload:
        return {path: payload}
    flat: dict[tuple[str, ...], Any] = {}
    for key, item in payload.items():
        flat.update(_leaves(item, (*path, str(key))))
    return flat


def _show(value: Any) -> str:
    """A value as the reason shows it: a short scalar as itself, a long one cut, and a
    mapping or list by its size (never a fragment of its JSON)."""
    if isinstance(value, dict):
        return f"{len(value)} keys"
    if isinstance(value, (list, tuple)):
        return f"{len(value)} items"
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 1] + "…"


def _inputs_phrase(changed: list[str], stage: Stage) -> str:
    """The inputs that changed, named when the payload names them (``input
    fit/map/T=shared/seed=0 changed``; several: the first and a count), else how many
    inputs the stage has."""
    named = [name for name in changed if name in stage.inputs]
    if not named:  # the payload keeps the inputs' keys unnamed (a list): say how many there are
        if len(stage.inputs) == 1:
            return f"input {stage.inputs[0]} changed"
        return f"an input changed (of {len(stage.inputs)})" if stage.inputs else "an input changed"
    if len(named) == 1:
        return f"input {named[0]} changed"
    return f"inputs {named[0]} and {len(named) - 1} more changed"


def describe_change(stage: Stage, previous: dict[str, Any]) -> str:
    """Why ``stage`` is stale: what differs between the config it last finished under
    (``previous``, from the cache's index) and its config now, in the spec's words, e.g.
    ``methods.sghmc.lr changed 0.01 → 0.02``, ``data changed``, ``versions changed``."""
    before, after = _leaves(previous), _leaves(stage.config)
    phrases: list[str] = []
    inputs: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, _MISSING), after.get(path, _MISSING)
        if old == new:
            continue
        head = path[0] if path else ""
        if head == "data":
            phrase = "data changed"
        elif head == "versions":
            phrase = f"versions changed ({'.'.join(path[1:])} {_show(old)} → {_show(new)})"
        elif head in ("inputs", "fit", "reference", "reference_evaluation"):
            name = path[1] if head == "inputs" and len(path) > 1 else ""
            if name not in inputs:
                inputs.append(name)
            continue
        elif head == "reference_file":
            phrase = "evaluate.reference.file's probabilities changed"
        else:
            where = f"methods.{stage.method}" if head == "method" else _SPEC_KEYS.get(head, head)
            key = ".".join((where, *path[1:])) if path else "config"
            if old is _MISSING:
                phrase = f"{key} added ({_show(new)})"
            elif new is _MISSING:
                phrase = f"{key} removed (was {_show(old)})"
            else:
                phrase = f"{key} changed {_show(old)} → {_show(new)}"
        if phrase not in phrases:
            phrases.append(phrase)
    if inputs:
        phrases.append(_inputs_phrase(inputs, stage))
    if not phrases:
        return "its key changed"
    more = len(phrases) - _SHOWN_CHANGES
    return "; ".join(phrases[:_SHOWN_CHANGES]) + (f"; and {more} more" if more > 0 else "")
