"""The causal language model family: a transformers model (built from a config or read
from a local folder) whose trainable tensors (LoRA adapters, parameter globs) the engines
infer, the rest frozen in place and held once per process
(:func:`bayesflow.llm.shared_causal_lm`).

Every problem of this family is built by :func:`language_model_problem`: a fit stage's, a
loaded posterior's (``load_posterior``, the text pyfunc model) and a saved posterior
folder's (:func:`bayesflow.llm.product.load_lm_posterior`).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.errors import StageError
from bayesflow.families.base import Sizes

if TYPE_CHECKING:
    from torch import nn

    from bayesflow.data import Dataset
    from bayesflow.engines.base import Problem
    from bayesflow.likelihoods import Likelihood
    from bayesflow.spec.load import LoadedSpec

__all__ = ["FAMILY", "REFERENCE", "CausalLMFamily", "absolute_path", "base_model_text", "choice_problem",
           "language_model_problem", "language_model_with"]

# The file beside a language model's posterior.npz that names its base model.
REFERENCE = "base_model.json"


def language_model_problem(
    model: Any, scored: int, prior: Any, device: Any, base_dir: Path | None, train_targets: Any = None,
    shared: bool = True,
) -> tuple[Problem, Likelihood]:
    """The problem over a ``causal_lm`` model section's trainable tensors and its next-token
    likelihood.

    Args:
        model: the model section (a :class:`~bayesflow.spec.llm.CausalLMSpec` or its dict).
        scored: tokens scored per window.
        prior: the prior over the trainable tensors (``none()`` to predict).
        device: where the model and the data live.
        base_dir: the folder a relative ``model.path`` is taken from.
        train_targets: the training windows' scored tokens; N their count (1 when None).
        shared: read the process's one frozen model (False: a model of its own, as a saved
            posterior folder gets).
    """
    from bayesflow.llm import build_causal_lm, shared_causal_lm
    from bayesflow.llm.likelihood import NextToken
    from bayesflow.llm.problem import build_lm_problem

    likelihood = NextToken()
    network, names = (shared_causal_lm if shared else build_causal_lm)(model, base_dir)
    network.to(device)
    num_data = 1 if train_targets is None else likelihood.data_points(train_targets)
    return build_lm_problem(network, names, prior, num_data, scored, device), likelihood


def choice_problem(
    model: Any, data: Any, num_choices: int | None, prior: Any, device: Any, base_dir: Path | None,
    train_targets: Any = None, shared: bool = True, continuation_tokens: int | None = None,
) -> tuple[Problem, Likelihood]:
    """The problem over a ``causal_lm`` model section's trainable tensors asked the
    questions of a ``multiple_choice`` data section, and its likelihood
    (:func:`bayesflow.llm.choices.build_choice_problem`).

    Args:
        model: the model section (a :class:`~bayesflow.spec.llm.CausalLMSpec` or its dict).
        data: the data section (a :class:`~bayesflow.spec.choice.MultipleChoiceSpec`):
            its labels, in its tokenizer, give the label tokens.
        num_choices: C, the choices per question (None: the number of ``data.labels``).
        prior, device, base_dir, shared: as for :func:`language_model_problem`.
        train_targets: the training answers; N their count (1 when None).
        continuation_tokens: with ``data.scoring: continuation``, the most continuation
            tokens of a question (the data's).
    """
    from bayesflow.data.multiple_choice import label_tokens
    from bayesflow.llm import build_causal_lm, shared_causal_lm
    from bayesflow.llm.choices import build_choice_problem
    from bayesflow.llm.likelihood import MultipleChoice
    from bayesflow.spec.llm import CausalLMSpec

    section = model if isinstance(model, CausalLMSpec) else CausalLMSpec.model_validate(model)
    count = num_choices if num_choices is not None else len(data.labels or ())
    scored = getattr(data, "scoring", "label") == "continuation"
    if scored and not continuation_tokens:
        raise StageError("data.scoring: continuation needs the data's most continuation tokens (the dataset's "
                         "continuation_tokens); this posterior cannot predict questions without its data")
    labels = None if scored else label_tokens(data, count, section.model_dump(mode="json"), base_dir)
    likelihood = MultipleChoice()
    network, names = (shared_causal_lm if shared else build_causal_lm)(model, base_dir)
    network.to(device)
    num_data = 1 if train_targets is None else likelihood.data_points(train_targets)
    continuation = (count, int(continuation_tokens)) if scored and continuation_tokens else None
    problem = build_choice_problem(network, names, prior, num_data, labels, device, continuation=continuation)
    assert isinstance(problem.observation, MultipleChoice)
    return problem, problem.observation


def language_model_with(problem: Problem, params: Any) -> nn.Module:
    """A copy of the problem's language model with its trainable tensors set to the flat
    vector ``params`` (the frozen weights are copied too: a model of its own)."""
    import torch

    model = copy.deepcopy(problem.module)
    assert model is not None, "a language-model problem holds its model"
    values = dict(model.named_parameters())
    sizes = [math.prod(shape) for shape in problem.param_shapes]
    with torch.no_grad():
        for name, piece, shape in zip(problem.param_names, torch.as_tensor(params).split(sizes), problem.param_shapes):
            values[name].copy_(piece.reshape(shape).to(values[name].dtype))
    return model.eval()


def base_model_text(spec: Any, scored: int | None, base_dir: Path | None = None) -> str:
    """The text of ``base_model.json``: the model section (a config-built model's ``seed``
    included; a folder by its path, made absolute from ``base_dir`` when given) and the
    tokens scored per window (none for multiple-choice questions)."""
    model = spec.model_dump(mode="json")
    if base_dir is not None and isinstance(model.get("path"), str):
        model["path"] = absolute_path(model["path"], base_dir)
    reference = {"model": model} if scored is None else {"model": model, "scored": scored}
    return json.dumps(reference, indent=2) + "\n"


def absolute_path(path: str, base_dir: Path | None) -> str:
    """A relative model folder ``path`` made absolute from ``base_dir`` (default the working
    directory); an absolute, ``package:`` or ``models:`` path as it is (``package:`` resolves
    inside the installed bayesflow, ``models:`` in the model cache, wherever it is loaded)."""
    if path.startswith(("package:", "models:")) or Path(path).expanduser().is_absolute():
        return path
    return str(((base_dir or Path.cwd()) / path).resolve())


class CausalLMFamily:
    """Causal language models on text windows under the next-token likelihood."""

    def check_model(self, loaded: LoadedSpec) -> None:
        """The extra, the folder, the context, the subset (:mod:`bayesflow.llm.checks`)."""
        from bayesflow.llm.checks import check_language_model

        check_language_model(loaded.spec, loaded.base_dir)

    def check_with_data(self, loaded: LoadedSpec, dataset: Dataset) -> None:
        """The statements fit the model's context (the windows were cut to it by the data
        loader): :func:`bayesflow.data.statements.check_statement_lengths`."""
        if dataset.statements is None:
            return
        from bayesflow.data.statements import check_statement_lengths
        from bayesflow.llm.checks import structure_of
        from bayesflow.llm.problem import context_of

        context = context_of(structure_of(loaded.spec.model, loaded.base_dir))
        check_statement_lengths(dataset, loaded.spec, loaded.base_dir, context)

    def problem(
        self, spec: Any, sizes: Sizes, prior: Any, device: Any, base_dir: Path | None
    ) -> tuple[Problem, Likelihood]:
        """The problem over the trainable tensors on the process's one frozen model: next
        tokens of text windows, or the answers of multiple-choice questions."""
        if spec.data.INPUTS == "choice_prompts":
            return choice_problem(spec.model, spec.data, sizes.num_classes, prior, device, base_dir,
                                  sizes.train_targets, continuation_tokens=sizes.continuation_tokens)
        return language_model_problem(spec.model, int(spec.data.scored), prior, device, base_dir,
                                      sizes.train_targets)

    def module_with(self, problem: Problem, params: Any) -> nn.Module:
        """:func:`language_model_with`."""
        return language_model_with(problem, params)

    def posterior_files(self, spec: Any, base_dir: Path | None) -> dict[str, str]:
        """``base_model.json``: the model section (a folder by its absolute path) and the
        tokens scored per window, what :func:`bayesflow.llm.product.load_lm_posterior` reads."""
        if spec.data.INPUTS == "choice_prompts":  # no saved-folder loader of a question model yet
            return {REFERENCE: base_model_text(spec.model, None, base_dir)}
        return {REFERENCE: base_model_text(spec.model, int(spec.data.model_dump()["scored"]), base_dir)}


FAMILY = CausalLMFamily()
