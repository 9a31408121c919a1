"""A loaded posterior of a ``causal_lm`` run: the problem over the trainable tensors on the
one frozen model of the process, and the model with a parameter vector set.

The run's ``posterior.npz`` holds the trainable tensors only (LoRA adapters, a last
layer); the base model is rebuilt from the run's resolved spec (a config and the
``seed`` of its weights, or a local folder), as :func:`bayesflow.llm.product.load_lm_posterior`
rebuilds it from a ``base_model.json``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = ["language_model_problem", "language_model_with"]


def language_model_problem(spec: Any, device: str, base_dir: Path | None) -> tuple[Any, Any, nn.Module]:
    """The problem (no prior, N = 1: for predicting), the next-token likelihood and the
    model of a ``causal_lm`` spec; the frozen model is the process's shared one."""
    from bayesflow.likelihoods import NextToken
    from bayesflow.llm import shared_causal_lm
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.priors import none

    model, names = shared_causal_lm(spec.model, base_dir)
    model.to(device)
    problem = build_lm_problem(model, names, none(), 1, spec.data.scored, device)
    return problem, NextToken(), model


def language_model_with(problem: Any, params: Any) -> nn.Module:
    """A copy of the problem's language model with its trainable tensors set to the flat
    vector ``params`` (the frozen weights are copied too: a model of its own)."""
    import torch

    model = copy.deepcopy(problem.forward.language_model)
    values = dict(model.named_parameters())
    sizes = [math.prod(shape) for shape in problem.param_shapes]
    with torch.no_grad():
        for name, piece, shape in zip(problem.param_names, torch.as_tensor(params).split(sizes), problem.param_shapes):
            values[name].copy_(piece.reshape(shape).to(values[name].dtype))
    return model.eval()
