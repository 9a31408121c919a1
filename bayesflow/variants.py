"""The API's side of a sweep: each variant's data (loaded once per ``data`` block), the
plan of every variant, and the runner that computes each stage on its variant's spec.

:mod:`bayesflow.api` calls these; the planning itself is :mod:`bayesflow.dag.sweep`, the
loading of variants :mod:`bayesflow.spec.sweep`.
"""

from __future__ import annotations

import json

from bayesflow.dag.plan import Plan
from bayesflow.dag.sweep import PlannedVariant, VariantRunner, plan_sweep
from bayesflow.data import Dataset, check_data, load_dataset
from bayesflow.data.reference import reference_digest, with_reference
from bayesflow.data.statements import with_statements
from bayesflow.errors import DataError, SpecError
from bayesflow.families import data_model_section, family_of
from bayesflow.spec.checks import located
from bayesflow.spec.load import LoadedSpec
from bayesflow.spec.sweep import Sweep

__all__ = ["load_data", "plan_variants", "variant_runner"]


def load_data(loaded: LoadedSpec, loaded_data: dict[str, Dataset] | None = None) -> Dataset:
    """The data of ``loaded``, checked against its likelihood before any fit (a
    DataError, exit 3), with its reference probabilities (``evaluate.reference.file``,
    checked against the data: a SpecError, exit 3) and statements (``evaluate.statements``,
    a SpecError, exit 3), and a ``python:`` model built once on it (a SpecError, exit 3);
    ``loaded_data`` reuses data already loaded for an equal ``data``
    block from the same folder (the variants of a sweep)."""
    spec = loaded.spec
    model = data_model_section(spec)  # what the data loader reads of the model (a tokenizer)
    block = json.dumps([spec.data.model_dump(mode="json"), str(loaded.base_dir), model], sort_keys=True)
    cached = loaded_data if loaded_data is not None else {}
    family = family_of(spec).implementation()
    try:
        family.check_model(loaded)  # a language model: the extra, the folder, the context
        if block not in cached:
            cached[block] = load_dataset(spec.data.model_dump(), loaded.base_dir, model)
        check_data(cached[block], spec.likelihood.name)
        dataset = with_reference(cached[block], loaded.spec, loaded.base_dir)
        dataset = with_statements(dataset, loaded.spec, loaded.base_dir)
        # A `python:` model's factory, called; a language model's statements against its context.
        family.check_with_data(loaded, dataset)
    except DataError as error:  # about the spec's keys (data.files.2), not a file of its own
        if loaded.path is None or error.path is not None:
            raise
        raise located(error, loaded.locations, str(loaded.path)) from error
    except SpecError as error:  # point `data.module: ...`, `model.python: ...` at the spec's line
        if loaded.path is None:
            raise
        raise located(error, loaded.locations, str(loaded.path)) from error
    return dataset


def plan_variants(sweep: Sweep, code: dict[str, str]) -> tuple[Plan, dict[str, Dataset]]:
    """The plan of every variant of ``sweep`` and each variant's data by its label."""
    loaded_data: dict[str, Dataset] = {}
    datasets = {item.label: load_data(item.loaded, loaded_data) for item in sweep.variants}
    planned = [
        PlannedVariant(item.tag, item.label, item.variant.values, item.loaded.spec,
                       datasets[item.label].digest, reference_digest(datasets[item.label]))
        for item in sweep.variants
    ]
    return plan_sweep(planned, code), datasets


def variant_runner(sweep: Sweep, datasets: dict[str, Dataset]) -> VariantRunner:
    """Computes each stage with a runner on its variant's spec and data."""
    from bayesflow.stages import StageRunner

    return VariantRunner({
        item.label: StageRunner(item.loaded, datasets[item.label]) for item in sweep.variants
    })
