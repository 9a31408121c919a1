"""Model families: how a spec's model, data and likelihood become a
:class:`~bayesflow.engines.base.Problem`, and what a fit of them leaves behind.

A family is one registry entry, as transformers keeps one ``Auto*`` mapping entry per model
type: the model names it owns, the data and likelihoods only it reads, the evaluations only
it supports, the rule that says which methods run on it (read from the methods' own
traits), and the module that implements it (:class:`~bayesflow.families.base.Family`),
imported on first use. The registry itself is torch-free, so the spec layer reads it too.

Nothing outside a family asks which family a spec belongs to by name; it asks
:func:`family_of` and calls the entry. A new family is one module with a ``FAMILY`` and
one :class:`FamilyEntry` in :data:`FAMILIES`.

========== =============================== ===========================================
family     models                          implementation
========== =============================== ===========================================
``flat``   every registered and ``python:`` :mod:`bayesflow.families.flat`
           network over a flat vector
``causal`` ``causal_lm`` (transformers)    :mod:`bayesflow.llm.family`
========== =============================== ===========================================
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "FamilyEntry", "data_model_section", "family_of", "methods_for", "register_likelihood"]


@dataclass(frozen=True)
class FamilyEntry:
    """One model family.

    Attributes:
        name: the family's name (messages, docs).
        module: the module holding its ``FAMILY`` (:class:`~bayesflow.families.base.Family`),
            imported when first asked for: torch and any extra load only then.
        models: the ``model.name`` values it owns; empty for the default family, which owns
            every model no other family names.
        data: ``data.name`` values only this family reads.
        likelihoods: ``likelihood.name`` values only this family uses.
        evaluations: ``evaluate`` keys only this family supports (``statements``).
        scores_texts: a fitted posterior scores texts (``score_texts``, a text pyfunc model).
        model_reads_data: the data loader needs the model section (its tokenizer).
        refuses: ``"module:function"``, a torch-free ``traits -> reason | None`` that says
            why a method cannot run on this family (None: it can); empty: every method runs.
        likelihood_module: the module that registers the family's own likelihoods in
            :data:`bayesflow.likelihoods.LIKELIHOODS` when imported.
        pyfunc: ``"module:function"`` that logs a fit's MLflow pyfunc model (the signature
            of :func:`bayesflow.tracking.pyfunc.log_posterior_model`), named here so that
            the tracking worker imports only the logger, not the family.
    """

    name: str
    module: str
    models: frozenset[str] = frozenset()
    data: frozenset[str] = frozenset()
    likelihoods: frozenset[str] = frozenset()
    evaluations: frozenset[str] = frozenset()
    scores_texts: bool = False
    model_reads_data: bool = False
    refuses: str = ""
    likelihood_module: str = ""
    pyfunc: str = "bayesflow.tracking.pyfunc:log_posterior_model"

    def implementation(self) -> Any:
        """The family's :class:`~bayesflow.families.base.Family` (imports its module)."""
        return importlib.import_module(self.module).FAMILY

    def refusal(self, traits: Any) -> str | None:
        """Why a method of ``traits`` cannot run on this family, or None when it can."""
        if not self.refuses:
            return None
        module, _, function = self.refuses.partition(":")
        rule: Callable[[Any], str | None] = getattr(importlib.import_module(module), function)
        return rule(traits)

    def pyfunc_logger(self) -> Callable[..., str | None]:
        """The function that logs a fit's pyfunc model (imports its module)."""
        module, _, function = self.pyfunc.partition(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


FLAT = FamilyEntry("flat", "bayesflow.families.flat")
CAUSAL_LM = FamilyEntry(
    "causal language model",
    "bayesflow.llm.family",
    models=frozenset({"causal_lm"}),
    data=frozenset({"text", "multiple_choice"}),
    likelihoods=frozenset({"next_token", "multiple_choice"}),
    evaluations=frozenset({"statements"}),
    scores_texts=True,
    model_reads_data=True,
    refuses="bayesflow.spec.llm_checks:refusal",
    likelihood_module="bayesflow.llm.likelihood",
    pyfunc="bayesflow.tracking.text_pyfunc:log_text_model",
)
# The default family last: it owns every model the others do not name.
FAMILIES: tuple[FamilyEntry, ...] = (CAUSAL_LM, FLAT)


def family_of(model: str | Any) -> FamilyEntry:
    """The family of a ``model.name`` (or of a spec, by its ``model.name``)."""
    name = model if isinstance(model, str) else model.model.name
    for entry in FAMILIES:
        if name in entry.models:
            return entry
    return FAMILIES[-1]


def data_model_section(spec: Any) -> dict[str, Any] | None:
    """What the data loader reads of ``spec``'s model section (a folder's tokenizer): the
    section as JSON for a family whose data need it, else None (and so not in the data's key)."""
    if not family_of(spec).model_reads_data:
        return None
    return spec.model.model_dump(mode="json")  # type: ignore[no-any-return]


def methods_for(entry: FamilyEntry) -> list[str]:
    """The engines that run on a family, by name, from their traits."""
    from bayesflow.methods.registry import METHODS

    return [method.name for method in METHODS if entry.refusal(method.traits) is None]


def register_likelihood(name: str) -> None:
    """Import the module of the family that owns the likelihood ``name``, which registers
    it (nothing when no family owns it: the registry's lookup then names the known ones)."""
    for entry in FAMILIES:
        if name in entry.likelihoods and entry.likelihood_module:
            importlib.import_module(entry.likelihood_module)
