"""Sweeps over any key, in Hydra's multirun grammar (``bayesflow run spec.yaml -m ...``).

With ``-m``, an override whose value holds top-level commas sweeps that key::

    prior.variance=0.1,1                 two values
    model.hidden=[32,32],[64,64]         two lists (commas inside brackets do not split)
    methods.sghmc.lr=choice(0.01,0.1)    the same, written as Hydra's choice()
    data.split_seed=range(0,3)           0, 1, 2 (Python's range; floats allowed)
    description='a, b'                   not a sweep: quoted commas do not split

The temperature × seed grid is not swept this way: write ``temperatures=[0.1,1]``. Nor are
the keys every variant must share (``name``, ``tracking``, ``report``, ``plots`` and where
and how stages run: ``execution.cache_dir``, ``workers``, ``executor``, ``keep_going``).

A sweep is the Cartesian product of its swept keys. Each point of the product is a
*variant*: the spec with one value per swept key, planned into its own cells (method ×
temperature × seed), all under one MLflow parent run. Stages whose keys are equal across
variants (a MAP fit when only a sampler's step size is swept) are computed once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.errors import SpecError

if TYPE_CHECKING:
    from bayesflow.spec.load import LoadedSpec

__all__ = [
    "LoadedVariant", "Sweep", "Variant", "expand_sweeps", "load_sweep", "split_top_level",
    "unswept_commas", "variant_label", "variant_tag",
]

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


def variant_label(values: Sequence[tuple[str, str]]) -> str:
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


# Keys one run shares across its variants (one parent run, one cache, one report), with
# what to write instead; `temperatures` and `seeds` already make every variant's grid.
_SHARED_KEYS = {
    "temperatures": "every variant runs the whole temperature grid; write the list form "
    "`temperatures=[0.1,1]` instead",
    "seeds": "every variant runs every seed; write the list form `seeds=[0,1]` instead",
    "name": "a sweep is one workflow under one name",
    "tracking": "a sweep logs to one store and experiment",
    "report": "a sweep has one report over every variant",
    "plots": "a sweep has one set of plots over every variant",
    "execution.cache_dir": "a sweep runs under one cache folder",
    "execution.workers": "a sweep runs on one executor",
    "execution.executor": "a sweep runs on one executor",
    "execution.keep_going": "a sweep runs under one scheduler",
}
# A readable stage-name suffix longer than this becomes `v<index>-<hash>`.
MAX_TAG = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


def variant_tag(values: Sequence[tuple[str, str]], index: int) -> str:
    """The suffix that makes a variant's stage names unique, safe in a file name:
    ``prior.variance=0.1,model.hidden=32-32`` (characters other than letters, digits and
    ``._=-`` become ``-``), or ``v<index>-<hash>`` when that would be long."""
    parts = [f"{key}={_UNSAFE.sub('-', value).strip('-') or '_'}" for key, value in values]
    tag = ",".join(parts)
    if len(tag) <= MAX_TAG:
        return tag
    return f"v{index}-{hashlib.sha256(variant_label(values).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class LoadedVariant:
    """One variant of a sweep, validated.

    Attributes:
        variant: its overrides and swept values.
        loaded: the spec with its overrides, validated.
        tag: the suffix of its stage names (:func:`variant_tag`).
    """

    variant: Variant
    loaded: LoadedSpec
    tag: str

    @property
    def label(self) -> str:
        """``prior.variance=0.1 model.hidden=[32,32]``."""
        return self.variant.label


@dataclass(frozen=True)
class Sweep:
    """A multirun (``-m``): the spec loaded once per variant, in the order of the product.

    Attributes:
        variants: every variant, validated.
        keys: the swept keys, in the order given.
    """

    variants: tuple[LoadedVariant, ...]
    keys: tuple[str, ...]

    @property
    def first(self) -> LoadedSpec:
        """The first variant's spec: what every variant shares (name, tracking, report,
        plots, execution) is read from it."""
        return self.variants[0].loaded


def _check_sweepable(text: str) -> None:
    found = _swept_values(text)
    if found is None:
        return
    key = found[0].lstrip("+")
    for shared, why in _SHARED_KEYS.items():
        if key == shared or key.startswith(shared + "."):
            raise SpecError(f"override {text!r}: `{key}` cannot be swept: {why}")


def load_sweep(source: str | Path | dict[str, Any], overrides: Sequence[str]) -> Sweep:
    """Load every variant of a multirun: the spec with each variant's overrides, validated.

    Raises:
        SpecError: no override sweeps anything; a key that cannot be swept (the grid's
            ``temperatures`` and ``seeds``, or a key every variant shares); more than
            :data:`MAX_VARIANTS` variants; two variants that are one spec (values equal
            once read, such as ``0.1`` and ``1e-1``); or a variant that is invalid, its problems
            prefixed with the variant (``variant 2 of 4 (prior.variance=-1): ...``) and
            each still located (a key that does not exist names the closest one).
    """
    from bayesflow.spec.load import load_spec

    for text in overrides:
        _check_sweepable(text)
    variants = expand_sweeps(list(overrides))
    if not variants[0].values:
        raise SpecError(
            "-m (multirun) needs an override that sweeps, such as `prior.variance=0.1,1` or "
            "`model.hidden=[32,32],[64,64]` (values separated by top-level commas); "
            "without one, drop -m"
        )
    loaded: list[LoadedVariant] = []
    tags: set[str] = set()
    for index, variant in enumerate(variants, 1):
        try:
            spec = load_spec(source, list(variant.overrides))
        except SpecError as error:
            head = f"variant {index} of {len(variants)} ({variant.label})"
            raise SpecError([f"{head}: {problem}" for problem in error.problems], error.path) from None
        tag = variant_tag(variant.values, index)
        tag = tag if tag not in tags else f"{tag}-v{index}"
        tags.add(tag)
        loaded.append(LoadedVariant(variant, spec, tag))
    _refuse_duplicates(loaded)
    return Sweep(tuple(loaded), tuple(key for key, _ in variants[0].values))


def _refuse_duplicates(variants: Sequence[LoadedVariant]) -> None:
    """Refuse variants that are one spec written twice (``prior.variance=0.1,1e-1``):
    they would compute once and show as two rows, or, with equal labels, merge."""
    seen: dict[str, tuple[int, LoadedVariant]] = {}
    problems = []
    for index, item in enumerate(variants, 1):
        text = json.dumps(item.loaded.spec.model_dump(mode="json"), sort_keys=True, default=str)
        if text not in seen:
            seen[text] = (index, item)
            continue
        first_index, first = seen[text]
        keys = ", ".join(key for key, _ in item.variant.values)
        problems.append(
            f"variants {first_index} ({first.label}) and {index} ({item.label}) of {len(variants)} "
            f"are the same spec once their values are read (swept: {keys}), so they would compute "
            "once and show twice; give each value once"
        )
    if problems:
        raise SpecError(problems)
