"""Cross-key checks of a spec with a causal language model, on the raw mapping (torch-free).

A ``causal_lm`` model reads ``text`` data under the ``next_token`` likelihood, or
``multiple_choice`` data under the ``multiple_choice`` likelihood, and only those go
together (the data/model pair is :func:`bayesflow.spec.relations.cross_check`'s
``ACCEPTS`` check; :data:`LIKELIHOOD_OF_DATA` the data/likelihood pair). A method runs on a language model when its engine takes gradients and
log posteriors of the whole batch: every method but those whose traits say they take one
gradient or curvature row per example (``per_example_rows``: EKF), a curvature other than the
token Fisher or the KFAC empirical Fisher (the dense Laplaces, the KFAC GGN; on multiple-choice
questions the KFAC GGN runs: C outputs), or a closed form for other models
(``models``: the conjugate linear model). What needs the model's structure (its context,
its modules) is :mod:`bayesflow.llm.checks`, run with the data.
"""

from __future__ import annotations

from typing import Any

from bayesflow.families import CAUSAL_LM, methods_for
from bayesflow.methods.registry import METHODS, methods_with_curvature

__all__ = [
    "CHOICE_CURVATURES", "LIKELIHOOD_OF_DATA", "LM_CURVATURES", "dropout_problems", "language_model_problems",
    "refusal",
]

Problem = tuple[tuple[str, ...], str]

# The likelihood each of the family's data kinds is scored under, and what it scores.
LIKELIHOOD_OF_DATA = {"text": "next_token", "multiple_choice": "multiple_choice"}
WHAT_IS_SCORED = {"next_token": "tokens", "multiple_choice": "answers to questions"}

# The Laplace curvatures that run on a language model: one term per scored token
# (bayesflow.llm.curvature): the empirical Fisher, and the GGN from sampled tokens; and the
# Kronecker-factored empirical Fisher of the trainable linear layers (bayesflow.llm.kfac).
LM_CURVATURES = frozenset({"diag_fisher", "diag_ggn", "kfac_fisher"})
# On multiple-choice questions the outputs are C choice logits: the KFAC GGN takes C backward
# passes per batch (bayesflow.llm.kfac.choice_kfac_layers).
CHOICE_CURVATURES = LM_CURVATURES | {"kfac_ggn"}
# Why a curvature cannot run on a language model, where the general reason says too little,
# and the curvature to use instead (its methods are named from the registry).
_CURVATURE_REASONS = {
    "kfac_ggn": (("its G takes one backward pass per class of the vocabulary (32k-128k tokens); use {}, "
                  "the Kronecker-factored empirical Fisher"), "kfac_fisher"),
}


def refusal(traits: Any, likelihood: str | None = None) -> str | None:
    """Why a method of ``traits`` cannot run on a causal language model under
    ``likelihood``, or None when it can (the family's rule, :data:`bayesflow.families.CAUSAL_LM`,
    with no likelihood: the rule of next-token text)."""
    curvatures = CHOICE_CURVATURES if likelihood == "multiple_choice" else LM_CURVATURES
    if traits.curvature in _CURVATURE_REASONS and traits.curvature not in curvatures:
        reason, instead = _CURVATURE_REASONS[traits.curvature]
        return reason.format(methods_with_curvature(instead))
    if traits.per_example_rows or (traits.curvature is not None and traits.curvature not in curvatures):
        return "it needs one gradient or curvature row per example, or a closed form"
    if traits.models is not None and "causal_lm" not in traits.models:
        return "it is a closed form for other models"
    return None


def dropout_problems(name: str, engine: str, data: Any) -> list[Problem]:
    """A method whose members are dropout passes (its traits' ``dropout``: MC dropout) on a
    model with no adapter dropout to leave on: every pass would be the same network."""
    fix = "set `model.trainable.lora.dropout` (e.g. 0.1; the Bayesian-LoRA papers use 0.05-0.1)"
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("name") != "causal_lm":
        chosen = model.get("name") if isinstance(model, dict) else None
        return [(("methods", name, "engine"),
                 f"{engine} leaves a language model's LoRA dropout on at prediction, but `model.name` is "
                 f"{chosen!r}, which has none; use `model: {{name: causal_lm, trainable: {{lora: {{dropout: 0.1}}}}}}`, "
                 "or another method")]
    trainable = model.get("trainable")
    if not isinstance(trainable, dict):
        return []  # the schema reports a missing or malformed `trainable`
    lora = trainable.get("lora")
    if trainable.get("parameters") is not None and lora is None:
        return [(("model", "trainable", "parameters"),
                 f"methods.{name} ({engine}) leaves the LoRA adapters' dropout on at prediction, but a "
                 "`parameters:` subset has no adapters and so no dropout; use `trainable: {lora: {dropout: 0.1}}`, "
                 "or another method")]
    if not isinstance(lora, dict):
        return []
    dropout = lora.get("dropout", 0.0)
    if isinstance(dropout, (int, float)) and not isinstance(dropout, bool) and dropout == 0:
        where = ("model", "trainable", "lora", "dropout") if "dropout" in lora else ("model", "trainable", "lora")
        return [(where,
                 f"methods.{name} ({engine}) averages passes with the adapters' dropout on, but the dropout is 0, "
                 f"so every pass is the same network; {fix}")]
    return []


def _name(data: dict[str, Any], block: str) -> str | None:
    """The block's `name` when it is a string (anything else is the schema's error to report)."""
    section = data.get(block)
    name = section.get("name") if isinstance(section, dict) else None
    return name if isinstance(name, str) else None


def language_model_problems(data: Any) -> list[Problem]:
    """Problems of a spec whose model is ``causal_lm`` or whose likelihood is the family's
    (``next_token``, ``multiple_choice``)."""
    if not isinstance(data, dict):
        return []
    model, likelihood = _name(data, "model"), _name(data, "likelihood")
    if model != "causal_lm" and likelihood not in CAUSAL_LM.likelihoods:
        return []
    if model != "causal_lm" and likelihood is not None:
        source = {value: key for key, value in LIKELIHOOD_OF_DATA.items()}[likelihood]
        return [(("likelihood", "name"),
                 (f"{likelihood} scores the {WHAT_IS_SCORED[likelihood]} of a causal language model, but "
                  f"`model.name` is {model!r}; use `model: {{name: causal_lm, ...}}` with "
                  f"`data: {{name: {source}, ...}}`, or another likelihood"))]
    problems: list[Problem] = []
    dataset = _name(data, "data")
    expected = LIKELIHOOD_OF_DATA.get(dataset or "", "next_token")
    if likelihood is not None and likelihood != expected:
        problems.append((("likelihood", "name"),
                         (f"a causal_lm model on {dataset!r} data is scored by its own likelihood: "
                          f"use `likelihood: {{name: {expected}}}`, not {likelihood!r}")))
    problems += _data_problems(data)
    problems += _evaluate_problems(data, likelihood)
    methods = data.get("methods")
    if isinstance(methods, dict):
        runs = ", ".join(methods_for(CAUSAL_LM))
        for name, method in methods.items():
            engine = method.get("engine") if isinstance(method, dict) else None
            reason = (refusal(METHODS.get(engine).traits, likelihood)
                      if isinstance(engine, str) and engine in METHODS else None)
            if reason is not None:
                problems.append((("methods", str(name), "engine"),
                                 (f"{engine} cannot run on a causal language model ({reason}); "
                                 f"methods that can: {runs}")))
            prediction = method.get("prediction") if isinstance(method, dict) else None
            if isinstance(prediction, str) and prediction != "sampled" and likelihood != "multiple_choice":
                problems.append((("methods", str(name), "prediction"),
                                 (f"{prediction!r} linearises the network's outputs, a window's "
                                 "scored tokens × the vocabulary for a language model; use `sampled`")))
    return problems


def _data_problems(data: dict[str, Any]) -> list[Problem]:
    dataset, model = data.get("data"), data.get("model")
    if not isinstance(dataset, dict) or not isinstance(model, dict) or dataset.get("name") not in LIKELIHOOD_OF_DATA:
        return []
    if dataset.get("name") != "text":
        return _tokenizer_problems(dataset, model)
    problems: list[Problem] = []
    length, scored = dataset.get("length", 64), dataset.get("scored", 16)
    if all(isinstance(value, int) and not isinstance(value, bool) for value in (length, scored)):
        if scored >= length:
            problems.append((("data", "scored"),
                             (f"is {scored}, but a window has {length} tokens (data.length) and a "
                             "scored token needs one before it; use scored < length")))
        context = model.get("context", 128)
        if model.get("path") is None and isinstance(context, int) and length > context:
            problems.append((("data", "length"),
                             (f"windows of {length} tokens exceed the model's context of {context} "
                             f"tokens (model.context); use length <= {context}, or a larger context")))
    return problems + _tokenizer_problems(dataset, model)


def _tokenizer_problems(dataset: dict[str, Any], model: dict[str, Any]) -> list[Problem]:
    if dataset.get("tokenizer") == "model" and model.get("path") is None:
        return [(("data", "tokenizer"),
                 ("`model` reads the tokenizer of the model folder, but the model is built "
                  "from a config (no `model.path`); use `tokenizer: bytes`"))]
    return []


def _evaluate_problems(data: dict[str, Any], likelihood: str | None) -> list[Problem]:
    evaluate = data.get("evaluate")
    if not isinstance(evaluate, dict):
        return []
    problems: list[Problem] = []
    if evaluate.get("prior_predictive") is True:
        problems.append((("evaluate", "prior_predictive"),
                         ("the prior predictive check draws whole networks from the prior; a "
                         "language model's frozen weights are not drawn; set it to false")))
    if evaluate.get("reference") is not None:
        problems.append((("evaluate", "reference"),
                         ("compares class probabilities per test point; a language model's predictive is "
                          "one per scored token over the vocabulary, which is not compared yet; remove it")))
    prediction = evaluate.get("prediction")
    # A question's outputs are its C choice logits: the linearised predictives run there.
    if isinstance(prediction, str) and prediction != "sampled" and likelihood != "multiple_choice":
        problems.append((("evaluate", "prediction"),
                         (f"{prediction!r} linearises the network's outputs, a window's scored "
                         "tokens × the vocabulary for a language model; use `sampled`")))
    return problems
