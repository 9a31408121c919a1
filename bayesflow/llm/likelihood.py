"""The likelihoods of a causal language model: next-token (every scored token a datum) and
multiple-choice (every question a datum).

Outputs are (..., S, V) logits of a window's S scored tokens, targets (..., S) token ids,
log p per token (..., S). What differs from a likelihood of one datum per row is said
here, where the methods and the evaluation ask for it: N counts scored tokens, the diagonal
curvatures are taken per token (:mod:`bayesflow.llm.curvature`), KFAC covers the trainable
linear layers with every position a row (:mod:`bayesflow.llm.kfac`), the predictive is
scored token by token (:mod:`bayesflow.evaluate.tokens`), and a dense curvature (d × d per
token) is refused.

:class:`MultipleChoice` is the categorical over a question's C choices; its outputs are the
(..., C) next-token logits of the choices' label tokens at the prompt's last position
(:mod:`bayesflow.llm.choices`), so a question is one row, as for any classifier: N counts
questions, the diagonal curvatures are the per-example ones of
:mod:`bayesflow.engines.curvature` (one gradient, or C vector-Jacobian products, per
question), KFAC (GGN or empirical Fisher) covers the trainable linear layers with every
real position of a prompt a row (:func:`bayesflow.llm.kfac.choice_kfac_layers`), and the
predictive is the classifier's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional

from bayesflow.errors import StageError
from bayesflow.likelihoods import LIKELIHOODS, Likelihood

__all__ = ["MultipleChoice", "NextToken", "SoftmaxOutputs", "multiple_choice", "next_token"]


class SoftmaxOutputs:
    """The categorical over the outputs' last dimension, whatever the leading ones (chains,
    windows, scored positions): what both likelihoods of the family share."""

    def log_prob(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """log softmax(outputs)[target] (...,) for logits (..., K) and targets (...)."""
        flat = functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1).long(),
                                        reduction="none")
        return -flat.view(targets.shape)

    def output_hessian(self, outputs: Tensor) -> Tensor:
        """diag(p) − p pᵀ (..., K, K), the Hessian of −log p in the logits."""
        probs = outputs.softmax(-1)
        return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)

    def probabilities(self, outputs: Tensor) -> Tensor:
        """softmax(outputs) (..., K)."""
        return outputs.softmax(-1)


@dataclass(frozen=True)
class NextToken(SoftmaxOutputs, Likelihood):
    """The categorical likelihood of a causal language model's scored tokens
    (:mod:`bayesflow.llm.problem`)."""

    name: str = "next_token"
    task: str = "classification"
    dense_curvature = False
    continual_curvature = "diag_fisher"  # the empirical Fisher per token (posteriors' example)

    def data_points(self, targets: Tensor) -> int:
        """Windows × scored tokens (a tensor's or an array's ``shape``)."""
        return math.prod(targets.shape)

    def diagonal_curvature(self, kind: str, problem: Any) -> Any:
        """One term per scored token: the empirical Fisher, or the GGN from sampled tokens."""
        from bayesflow.llm.curvature import token_curvature

        return token_curvature(kind, problem)

    def kfac_layers(self, engine: str, kind: str, problem: Any) -> Any:
        """The trainable ``nn.Linear`` layers (LoRA adapters, projections), every position
        of a window a row; the GGN is refused (its G takes one backward pass per class of
        the vocabulary).

        Raises:
            StageError: ``kind`` is ``ggn``.
        """
        if kind != "fisher":
            from bayesflow.methods.registry import methods_with_curvature

            raise StageError(
                f"{engine}: on a language model G would take one backward pass per class of the "
                f"vocabulary (32k-128k tokens); use {methods_with_curvature('kfac_fisher')} (the "
                f"Kronecker-factored empirical Fisher) or {methods_with_curvature('diag_ggn')} (the "
                "diagonal GGN from sampled tokens)"
            )
        from bayesflow.llm.kfac import lm_kfac_layers

        return lm_kfac_layers(problem)

    def evaluation(self, problem: Any, samples: Any, inputs: Tensor, targets: Tensor, *, ece_bins: int,
                   ece_binning: str, outputs_of: Any) -> Any:
        """Every scored token of every held-out window a point (:mod:`bayesflow.evaluate.tokens`)."""
        from bayesflow.evaluate.tokens import evaluate_tokens

        return evaluate_tokens(problem, samples(), inputs, targets, ece_bins, ece_binning=ece_binning,
                               outputs_of=outputs_of)


@LIKELIHOODS.register("next_token")
def next_token() -> Likelihood:
    """The categorical likelihood of a causal language model's scored tokens (:class:`NextToken`)."""
    return NextToken()


@dataclass(frozen=True)
class MultipleChoice(SoftmaxOutputs, Likelihood):
    """The categorical over a question's choices, its logits the language model's
    next-token logits of the choices' label tokens at the prompt's last position (the
    Laplace-LoRA and BLoB convention). Outputs (n, C), targets (n,) answer indices; the
    temperature convention is every likelihood's, with N = questions. With ``data.scoring:
    continuation`` the logits are the choices' summed continuation log-probabilities instead,
    and each input row ends in ``length_columns`` (C) continuation lengths that are not
    tokens (:func:`bayesflow.llm.choices.packed_arguments`)."""

    name: str = "multiple_choice"
    task: str = "classification"
    length_columns: int = 0
    dense_curvature = False  # d × d per question for every adapter: the diagonal or nothing

    def num_outputs(self, num_classes: int | None) -> int:
        assert num_classes is not None, "the number of choices"
        return num_classes

    def kfac_layers(self, engine: str, kind: str, problem: Any) -> Any:
        """The trainable ``nn.Linear`` layers (LoRA adapters, a last layer's projections),
        every real position of a prompt a row and the padding none; G of the GGN (C backward
        passes, the softmax over the choices) or of the empirical Fisher, per question
        (:func:`bayesflow.llm.kfac.choice_kfac_layers`)."""
        from bayesflow.llm.kfac import choice_kfac_layers

        return choice_kfac_layers(problem, self.length_columns)


@LIKELIHOODS.register("multiple_choice")
def multiple_choice() -> Likelihood:
    """The categorical over a question's choices (:class:`MultipleChoice`)."""
    return MultipleChoice()
