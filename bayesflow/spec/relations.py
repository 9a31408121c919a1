"""Checks that span several keys of a spec, run on the raw mapping (torch-free).

They run before the per-field validation has succeeded, so that every problem of a spec
is reported at once. What a method needs (a mode to start from, a positive temperature)
comes from its traits (:mod:`bayesflow.methods`), never from its name.
"""

from __future__ import annotations

import math
from typing import Any

from bayesflow.methods.registry import METHODS
from bayesflow.spec.llm_checks import dropout_problems, language_model_problems
from bayesflow.spec.statements import statements_problems

__all__ = ["cross_check"]


def _traits(engine: Any) -> Any:
    """The traits of the method named ``engine``, or None for an unknown name (reported
    by the union's own validation)."""
    return METHODS.get(engine).traits if isinstance(engine, str) and engine in METHODS else None


def cross_check(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """Problems that span several keys, found on the raw mapping: (key path, message).

    Runs on the unvalidated data so that these are reported together with every
    per-field problem, not only once the rest of the spec is valid.
    """
    problems = _vocabulary_problems(data) + _input_problems(data) + _held_out_problems(data)
    problems += _split_problems(data) + language_model_problems(data) + statements_problems(data)
    methods = data.get("methods") if isinstance(data, dict) else None
    if not isinstance(methods, dict):
        return problems
    temperatures = data.get("temperatures")
    has_zero = isinstance(temperatures, list) and any(
        isinstance(t, (int, float)) and not isinstance(t, bool) and t == 0 for t in temperatures
    )
    dataset = data.get("data") if isinstance(data.get("data"), dict) else {}
    for name, method in methods.items():
        if not isinstance(method, dict):
            continue
        if method.get("continual") is not None and not dataset.get("episodes"):
            problems.append((("methods", name, "continual"),
                "needs data that arrive in episodes; set `data.episodes` (e.g. 5 for "
                "sklearn_digits)"))
        if method.get("laplace_strength") is not None and method.get("continual") != "laplace_prior":
            problems.append((("methods", name, "laplace_strength"),
                ("weights the Laplace posterior carried between episodes and applies only with "
                 "`continual: laplace_prior`; set that or remove laplace_strength")))
        source, engine = method.get("from"), method.get("engine")
        traits = _traits(engine)
        if has_zero and traits is not None and traits.positive_temperature:
            problems.append((("methods", name, "engine"),
                f"{engine} samples exp(-U/T) and needs T > 0, but `temperatures` "
                "holds 0; drop 0 from the grid or use an optimiser for the T → 0 limit"))
        if source is not None and source not in methods:
            problems.append((("methods", name, "from"),
                f"names {source!r}, which is not a method (methods: {', '.join(methods)})"))
        if method.get("parameters") is not None and source is None:
            problems.append((("methods", name, "parameters"),
                ("inferring a subset of the parameters needs `from: <a method>` whose values "
                 "fix the others; add it")))
        if traits is not None and traits.needs_mode:
            problems.extend(_mode_problems(name, source, methods))
        task = _task(data)
        if traits is not None and task is not None and task not in traits.tasks:
            problems.append((("methods", name, "engine"),
                f"{engine} does not apply to {task} (the likelihood's task); it applies to "
                f"{', '.join(sorted(traits.tasks))}"))
        if traits is not None:
            problems.extend(_block_problems(name, engine, traits, data))
        if traits is not None and traits.dropout:
            problems.extend(dropout_problems(name, str(engine), data))
        problems.extend(_evidence_problems(name, method, data))
    problems.extend(_cycles(methods))
    problems.extend(_reference_problems(data, methods))
    return problems


def _block_problems(
    name: str, engine: Any, traits: Any, data: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """A method valid for some models or priors only (its traits' ``models``, ``priors``:
    a closed form) refuses the others."""
    problems: list[tuple[tuple[str, ...], str]] = []
    for block, allowed in (("model", traits.models), ("prior", traits.priors)):
        given = data.get(block)
        chosen = given.get("name") if isinstance(given, dict) else None
        if allowed is not None and isinstance(chosen, str) and chosen not in allowed:
            problems.append((("methods", name, "engine"),
                f"{engine} is exact only for {block} {' or '.join(sorted(allowed))}, but "
                f"`{block}.name` is {chosen!r}; use such a {block}, or another method"))
    return problems


def _evidence_problems(
    name: str, method: dict[str, Any], data: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """A Laplace's evidence-chosen prior needs a normal prior; its chosen noise, a gaussian
    likelihood and the prior chosen with it."""
    from bayesflow.methods.laplace import EVIDENCE_PRIORS

    problems: list[tuple[tuple[str, ...], str]] = []
    prior: dict[str, Any] = data["prior"] if isinstance(data.get("prior"), dict) else {}
    likelihood: dict[str, Any] = data["likelihood"] if isinstance(data.get("likelihood"), dict) else {}
    prior_name = prior.get("name", "diag_normal")
    chosen = method.get("prior_variance") in ("auto", "auto_per_tensor")
    if method.get("prior_variance") in ("auto", "auto_per_tensor", "validation") and isinstance(prior_name, str) \
            and prior_name not in EVIDENCE_PRIORS:
        how = ("chooses a normal prior's variance by the validation NLL" if method.get("prior_variance") == "validation"
               else "maximises the Laplace evidence over a normal prior's variance")
        problems.append((("methods", name, "prior_variance"), (
            f"`{method.get('prior_variance')}` {how}, but `prior.name` is {prior_name!r}; use prior "
            f"{' or '.join(sorted(EVIDENCE_PRIORS))}, or `prior_variance: spec`")))
    if method.get("noise_sd") == "auto":
        if likelihood.get("name") != "gaussian":
            problems.append((("methods", name, "noise_sd"), (
                f"`auto` chooses a gaussian likelihood's noise sd, but `likelihood.name` is "
                f"{likelihood.get('name')!r}; drop it, or use `likelihood: {{name: gaussian}}`")))
        elif not chosen:
            problems.append((("methods", name, "noise_sd"),
                "`auto` chooses the noise together with the prior; add `prior_variance: auto`"))
    return problems


# The metrics of the predictive plots (``<metric>_vs_temperature``): each needs a test set.
PREDICTIVE_PLOT_METRICS = frozenset({"nll", "accuracy", "ece", "brier", "rmse", "coverage"})


def _held_out_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """With ``data.test_fraction: 0`` nothing is held out: predictive plots (listed, or the
    task's defaults when ``plots`` is left out) and the prior predictive check are refused."""
    dataset = data.get("data") if isinstance(data, dict) else None
    if not isinstance(dataset, dict) or dataset.get("test_fraction") != 0:
        return []
    problems: list[tuple[tuple[str, ...], str]] = []
    plots = data.get("plots")
    why = "data.test_fraction is 0, so no rows are held out and there are no predictive metrics"
    fix = "hold out rows (e.g. data.test_fraction=0.25)"
    if plots is None:
        problems.append((("data", "test_fraction"),
            f"is 0 (no held-out rows), but `plots` is left out, which draws the task's "
            f"predictive plots; set `plots: []`, or {fix}"))
    elif isinstance(plots, list):
        named = [p for p in plots if isinstance(p, str) and p.split("_vs_")[0] in PREDICTIVE_PLOT_METRICS]
        if named:
            problems.append((("plots",),
                f"the plots {', '.join(named)} need held-out data: {why}; remove them, or {fix}"))
    evaluate = data.get("evaluate")
    if isinstance(evaluate, dict) and evaluate.get("prior_predictive") is True:
        problems.append((("evaluate", "prior_predictive"),
            f"predicts the held-out rows: {why}; set it to false, or {fix}"))
    return problems


def _split_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """A CSV file's ``split_column`` replaces the random split (so no fractions beside it,
    and not the target); continual episodes hold out no validation rows."""
    dataset = data.get("data") if isinstance(data, dict) else None
    if not isinstance(dataset, dict):
        return []
    problems: list[tuple[tuple[str, ...], str]] = []
    column = dataset.get("split_column")
    if dataset.get("name") == "csv" and column is not None:
        if column == dataset.get("target"):
            problems.append((("data", "split_column"), (
                f"names the target column {column!r}; give the column that says train, "
                "validation or test")))
        for key in ("test_fraction", "validation_fraction"):
            if key in dataset:
                problems.append((("data", key), (
                    f"cannot be given with data.split_column ({column!r} says which rows are "
                    "held out); remove it")))
    if dataset.get("validation_fraction") and dataset.get("episodes"):
        problems.append((("data", "validation_fraction"), (
            "holds out rows of data that arrive in episodes (data.episodes), which is not "
            "supported; set data.validation_fraction to 0, or data.episodes to 0")))
    return problems


def _task(data: dict[str, Any]) -> str | None:
    """The task of the spec's likelihood (classification, regression, energy), if known."""
    from bayesflow.spec.blocks import LikelihoodSpec

    likelihood = data.get("likelihood")
    member = _member(LikelihoodSpec, likelihood.get("name")) if isinstance(likelihood, dict) else None
    return None if member is None else member.TASK


def _mode_providers() -> list[str]:
    return [method.name for method in METHODS if method.traits.provides_mode]


def _mode_problems(
    name: str, source: Any, methods: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """A method that expands around a mode must start ``from`` a method that finds one."""
    providers = " or ".join(_mode_providers())
    if source is None:
        return [(("methods", name), f"a {methods[name].get('engine')} method needs "
                 f"`from: <a {providers} method>`; add it")]
    origin = methods.get(source)
    if not isinstance(origin, dict):
        return []
    traits = _traits(origin.get("engine"))
    if traits is None or traits.provides_mode:
        return []
    return [(("methods", name, "from"),
             f"must name a {providers} method, got {source!r} (engine {origin.get('engine')})")]


def _reference_problems(
    data: dict[str, Any], methods: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """``evaluate.reference`` must name a method (``reference: nuts`` or ``{method:
    nuts}``) whose stated ``temperature`` is in the grid and means something for it, or a
    file of class probabilities under a classification likelihood."""
    evaluate = data.get("evaluate")
    reference = evaluate.get("reference") if isinstance(evaluate, dict) else None
    key: tuple[str, ...] = ("evaluate", "reference")
    if isinstance(reference, dict):
        name, key = reference.get("method"), (*key, "method")
    else:
        name = reference
    if isinstance(reference, dict) and isinstance(reference.get("file"), str):
        task = _task(data)
        if task is not None and task != "classification":
            return [(("evaluate", "reference", "file"),
                     (f"holds class probabilities, but the likelihood's task is {task}; compare "
                      "with a method of the run instead (`reference: {method: <name>}`)"))]
    if not isinstance(name, str):
        return []  # None, or a wrong type that the field's own validation reports
    if name not in methods:
        return [(key, f"names {name!r}, which is not a method (methods: {', '.join(methods)})")]
    temperature = reference.get("temperature") if isinstance(reference, dict) else None
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool):
        return []
    method = methods[name]
    traits = _traits(method.get("engine")) if isinstance(method, dict) else None
    convention = data.get("temperature_convention", "posterior")
    if traits is not None and traits.shared_across_temperatures(convention):
        return [(("evaluate", "reference", "temperature"),
                 (f"{name!r} ({method.get('engine')}) is fitted once for every temperature, so "
                  "a reference temperature means nothing for it; drop `temperature`"))]
    grid = data.get("temperatures")
    if isinstance(grid, list) and not any(
        isinstance(t, (int, float)) and math.isclose(t, temperature, rel_tol=1e-9) for t in grid
    ):
        return [(("evaluate", "reference", "temperature"),
                 (f"is {temperature:g}, which is not in `temperatures` ({grid}); the reference "
                  f"is fitted on that grid only: add {temperature:g} to it, or drop `temperature`"))]
    return []


def _vocabulary_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """A ``cnn_lstm`` model must have an embedding row for every token id of ``imdb`` data."""
    if not isinstance(data, dict):
        return []
    dataset, model = data.get("data"), data.get("model")
    if not isinstance(dataset, dict) or not isinstance(model, dict):
        return []
    if dataset.get("name") != "imdb" or model.get("name") != "cnn_lstm":
        return []
    ids, rows = dataset.get("vocab_size", 20_000), model.get("vocabulary_size", 20_000)
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (ids, rows)):
        return []
    if rows >= ids:
        return []
    message = (
        f"is {rows}, but the data have {ids} token ids (data.vocab_size); set it to "
        "`${data.vocab_size}`"
    )
    return [(("model", "vocabulary_size"), message)]


def _cycles(methods: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """A problem for each `from:` chain that loops back on itself (reported once)."""
    loops: dict[frozenset[str], tuple[tuple[str, ...], str]] = {}
    for start in methods:
        seen = [start]
        current = _source(methods, start)
        while current is not None and current in methods:
            if current in seen:
                cycle = seen[seen.index(current):]
                if frozenset(cycle) not in loops:
                    loop = " -> ".join([*cycle, current])
                    loops[frozenset(cycle)] = (("methods", cycle[0], "from"), f"`from` forms a cycle: {loop}")
                break
            seen.append(current)
            current = _source(methods, current)
    return list(loops.values())


def _source(methods: dict[str, Any], name: str) -> Any:
    method = methods.get(name)
    return method.get("from") if isinstance(method, dict) else None


def _member(union: Any, name: Any) -> Any:
    """The member of a ``name``-discriminated union called ``name``, or None."""
    from bayesflow.spec.errors import union_members

    for member in union_members(union):
        field = member.model_fields.get("name")
        if field is not None and name in getattr(field.annotation, "__args__", ()):
            return member
    return None


def _input_problems(data: Any) -> list[tuple[tuple[str, ...], str]]:
    """The model must be able to read what the data give it (a text model needs tokens)."""
    from bayesflow.spec.blocks import DataSpec, ModelSpec

    if not isinstance(data, dict):
        return []
    dataset, model = data.get("data"), data.get("model")
    if not isinstance(dataset, dict) or not isinstance(model, dict):
        return []
    source, reader = _member(DataSpec, dataset.get("name")), _member(ModelSpec, model.get("name"))
    if source is None or reader is None or source.INPUTS in reader.ACCEPTS:
        return []
    fits = sorted(
        name for name in _union_names(ModelSpec) if source.INPUTS in _member(ModelSpec, name).ACCEPTS
    )
    return [(("model", "name"),
             f"{model.get('name')} reads {' or '.join(sorted(reader.ACCEPTS))} inputs, but data "
             f"{dataset.get('name')!r} gives {source.INPUTS}; use a model that reads "
             f"{source.INPUTS} ({', '.join(fits)}) or other data")]


def _union_names(union: Any) -> list[str]:
    """Every ``name`` the members of a union answer to."""
    from bayesflow.spec.errors import union_members

    return [
        name for member in union_members(union)
        for name in getattr(member.model_fields["name"].annotation, "__args__", ())
    ]

