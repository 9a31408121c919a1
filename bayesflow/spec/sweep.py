"""Sweeps over any key, in Hydra's multirun grammar (``bayesflow run spec.yaml -m ...``).

With ``-m``, an override whose value holds top-level commas sweeps that key::

    prior.variance=0.1,1                 two values
    model.hidden=[32,32],[64,64]         two lists (commas inside brackets do not split)
    methods.sghmc.lr=choice(0.01,0.1)    the same, written as Hydra's choice()
    data.split_seed=range(0,3)           0, 1, 2 (Python's range; floats allowed)
    description='a, b'                   not a sweep: quoted commas do not split

The temperature × seed grid is not swept this way: write ``temperatures=[0.1,1]``.

A sweep is the Cartesian product of its swept keys. Each point of the product is a
*variant*: the spec with one value per swept key, planned into its own cells (method ×
temperature × seed), all under one MLflow parent run. Stages whose keys are equal across
variants (a MAP fit when only a sampler's step size is swept) are computed once.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from bayesflow.errors import SpecError

__all__ = ["Variant", "expand_sweeps", "split_top_level", "variant_label"]

_FUNCTION = re.compile(r"^(choice|range)\((.*)\)$", re.DOTALL)
# A sweep of thousands of variants is almost surely a typo (and a long wait); refuse it.
MAX_VARIANTS = 256


@dataclass(frozen=True)
class Variant:
    """One point of a sweep: the overrides that make it, and its swept values by key."""

    overrides: tuple[str, ...]
    values: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        """``prior.variance=0.1 model.hidden=[32,32]``; empty when nothing is swept."""
        return variant_label(self.values)


def variant_label(values: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """The readable name of a variant from its (key, raw value) pairs."""
    return " ".join(f"{key}={value}" for key, value in values)


def split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets, braces, parentheses and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for character in text:
        if quote:
            quote = "" if character == quote else quote
        elif character in "'\"":
            quote = character
        elif character in "[{(":
            depth += 1
        elif character in "]})":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(character)
    parts.append("".join(current).strip())
    return parts


def _range_values(arguments: str, text: str) -> list[str]:
    """``range(start, stop[, step])`` as Python's range, numbers allowed to be floats."""
    try:
        numbers = [float(part) for part in split_top_level(arguments)]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or (len(numbers) == 3 and numbers[2] == 0):
        raise SpecError(f"override {text!r}: expected range(start, stop) or range(start, stop, step)")
    start, stop = numbers[0], numbers[1]
    step = numbers[2] if len(numbers) == 3 else 1.0
    count = max(0, int(-(-(stop - start) // step)))
    if count > MAX_VARIANTS:
        raise SpecError(f"override {text!r}: the range has {count} values, more than {MAX_VARIANTS}")
    values = [start + index * step for index in range(count)]
    integral = all(float(n).is_integer() for n in numbers)
    return [str(int(value)) if integral else repr(value) for value in values]


def _swept_values(text: str) -> tuple[str, list[str]] | None:
    """The key and values of a sweep override, or None when ``text`` sweeps nothing."""
    adding = text.startswith("+")
    body = text[1:] if adding else text
    if "=" not in body:
        return None
    key, raw = body.split("=", 1)
    raw = raw.strip()
    function = _FUNCTION.match(raw)
    if function and function.group(1) == "choice":
        values = split_top_level(function.group(2))
    elif function:
        values = _range_values(function.group(2), text)
    else:
        values = split_top_level(raw)
    if len(values) < 2 and not function:
        return None
    if any(not value for value in values):
        raise SpecError(f"override {text!r}: an empty value in the sweep; remove the stray comma")
    return ("+" if adding else "") + key.strip(), values


def expand_sweeps(overrides: list[str]) -> list[Variant]:
    """The variants of a multirun: the product of every swept key's values.

    Overrides that sweep nothing apply to every variant. With no sweep at all there is one
    variant holding every override.

    Raises:
        SpecError: an empty value, a malformed range, a key swept twice, or more than
            :data:`MAX_VARIANTS` variants.
    """
    fixed: list[str] = []
    swept: list[tuple[str, list[str]]] = []
    for text in overrides:
        found = _swept_values(text)
        if found is None:
            fixed.append(text)
            continue
        if any(found[0].lstrip("+") == key.lstrip("+") for key, _ in swept):
            raise SpecError(f"override {text!r}: the key is swept twice; give all its values once")
        swept.append(found)
    total = 1
    for _, values in swept:
        total *= len(values)
    if total > MAX_VARIANTS:
        raise SpecError(
            f"the sweep has {total} variants, more than {MAX_VARIANTS}; sweep fewer keys or values"
        )
    variants = []
    for point in itertools.product(*(values for _, values in swept)):
        pairs = tuple((key.lstrip("+"), value) for (key, _), value in zip(swept, point))
        made = tuple(f"{key}={value}" for (key, _), value in zip(swept, point))
        variants.append(Variant((*fixed, *made), pairs))
    return variants


def unswept_commas(overrides: list[str]) -> list[str]:
    """Overrides that would sweep under ``-m``, for a hint when ``-m`` was not given."""
    return [text for text in overrides if _swept_values(text) is not None]
