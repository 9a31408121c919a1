"""A causal language model asked multiple-choice questions: the problem whose outputs are
the next-token logits of the choices' label tokens at each prompt's answer position.

Prompts of different lengths share one (n, L) tensor, left-padded with ``-1``
(:data:`bayesflow.data.multiple_choice.PADDING`), so the answer position is the last column
of every row and the output layer runs at that one position (``logits_to_keep=1``) for a
whole batch. Left padding rather than right padding: with right padding each row's answer
sits at its own position, and the output layer would run at every position (n × L × V
logits, 0.3 GB for 8 prompts of 200 tokens over SmolLM2's 49k vocabulary) to gather one
per row. The forward derives from the padding what the unpadded prompt would have seen:

- the token ids, padding read as id 0 (any id: nothing reads it);
- each token's position, counted from the prompt's first real token (rotary or learned
  position embeddings see the positions of the unpadded prompt);
- a 4-D additive attention mask, causal and closed to padded keys. A padded query may
  attend to itself only (a row closed everywhere would be a softmax of equal minima:
  finite in float32, but it can overflow to −∞ and give NaN in bfloat16). transformers
  uses a 4-D mask as it is given, so no data-dependent branch runs: it works under
  ``vmap`` over chains and over questions (the per-question curvatures).

So each row's answer logits are those of its prompt run alone, up to rounding
(``tests/llm/test_multiple_choice.py`` checks them against transformers on each prompt
unpadded). When the trainable tensors start at decoder layer k > 0, the frozen trunk
(:mod:`bayesflow.llm.trunk`) runs the layers below k once per prompt, on these same
arguments, and keeps each prompt's hidden states by its padded tokens: every epoch, member,
chain and per-question curvature reads them back.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn
from torch.func import functional_call

from bayesflow.engines.base import Problem
from bayesflow.llm.likelihood import MultipleChoice
from bayesflow.llm.problem import build_lm_problem, trainable_values
from bayesflow.llm.trunk import kept_budget, largest, split_trunk
from bayesflow.priors import Prior

__all__ = ["answer_logits", "build_choice_problem", "continuation_scores", "padding_arguments"]


def padding_arguments(inputs: Tensor, dtype: torch.dtype) -> dict[str, Tensor]:
    """``input_ids``, ``position_ids`` and the 4-D ``attention_mask`` (…, 1, L, L) of
    left-padded prompts (padding ``-1``), as the module docstring derives them."""
    real = inputs >= 0
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    length = inputs.shape[-1]
    index = torch.arange(length, device=inputs.device)
    causal = index[:, None] >= index[None, :]
    itself = index[:, None] == index[None, :]
    allowed = causal & (real.unsqueeze(-2) | itself)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=inputs.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return {"input_ids": inputs.clamp(min=0), "position_ids": positions, "attention_mask": mask.unsqueeze(-3)}


def answer_logits(model: nn.Module, swapped: dict[str, Tensor], inputs: Tensor, keep: int = 1) -> Tensor:
    """The float32 next-token logits (n, V) at the last position of left-padded prompts
    (n, L), the tensors ``swapped`` in for the model's own; with ``keep`` > 1, those of the
    last ``keep`` positions (n, keep, V)."""
    dtype = next(model.parameters()).dtype
    options = {**padding_arguments(inputs.long(), dtype), "use_cache": False, "logits_to_keep": keep}
    logits = functional_call(model, swapped, (), options, strict=False).logits.float()
    return logits[..., -1, :] if keep == 1 else logits


def continuation_scores(logits: Tensor, sequences: Tensor, lengths: Tensor) -> Tensor:
    """Each sequence's summed log-probability of its last ``lengths`` tokens.

    Args:
        logits: (..., K + 1, V) next-token logits of the last K + 1 positions of
            ``sequences`` (the last position's are not used: nothing follows it).
        sequences: (..., L) token ids, each ending in its continuation (L > K).
        lengths: (...,) the continuation's token count, 1 to K.
    """
    count = logits.shape[-2] - 1
    log_probs = torch.log_softmax(logits[..., :count, :], dim=-1)
    targets = sequences[..., -count:].clamp(min=0)
    scored = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    inside = torch.arange(count, device=lengths.device) >= count - lengths.unsqueeze(-1)
    return torch.where(inside, scored, torch.zeros_like(scored)).sum(-1)


def build_choice_problem(
    model: nn.Module,
    names: tuple[str, ...],
    prior: Prior,
    num_data: int,
    labels: list[int] | None,
    device: torch.device | str = "cpu",
    share_trunk: bool = True,
    continuation: tuple[int, int] | None = None,
) -> Problem:
    """The problem over the tensors ``names`` of ``model`` whose forward gives, for each
    left-padded prompt (n, L), the logits (n, C) of the label tokens ``labels`` at its last
    position, under the :class:`~bayesflow.llm.likelihood.MultipleChoice` likelihood.

    With ``continuation = (C, K)`` (``scoring: continuation``) the inputs are instead
    :func:`~bayesflow.data.multiple_choice.continuation_rows` (n, C (L + 1)): each choice's
    prompt and continuation, left-padded, then the continuation's length (1 to K); the
    logits (n, C) are each continuation's summed log-probability
    (:func:`continuation_scores`), the output layer run at the last K + 1 positions only.
    A softmax of them is lm-eval's ``acc`` choice among sequences; the C sequences of a
    question share nothing but the trunk's bookkeeping (each is its own row).

    Everything but the forward is :func:`~bayesflow.llm.problem.build_lm_problem`'s (the
    prior over the trainable tensors, their start, ``logits`` for unpadded windows, which
    statements and texts read).

    Args:
        model: the language model (peft-wrapped for LoRA), on ``device``, in eval mode.
        names: its trainable tensors.
        prior: the prior over them.
        num_data: N, the number of training questions.
        labels: the token id of each choice's label, in order (None with ``continuation``).
        device: where the model and the data live.
        share_trunk: run the frozen layers below the first trainable one once per prompt
            (:mod:`bayesflow.llm.trunk`); False runs the whole forward every call (the
            reference the tests compare against).
        continuation: (C, K), the choices per question and the longest continuation in
            tokens, to score continuations; None scores label tokens.
    """
    base = build_lm_problem(model, names, prior, num_data, 1, device)
    trunk = split_trunk(model, names, kept_budget(base.device)) if share_trunk else None
    dtype = next(model.parameters()).dtype

    def arguments(inputs: Tensor) -> dict[str, Tensor]:
        return padding_arguments(inputs, dtype)

    likelihood = MultipleChoice()
    tensors = trainable_values(model, names)
    dtypes = tuple(value.dtype for value in tensors.values())
    sizes = [math.prod(shape) for shape in base.param_shapes]
    label_ids = None if labels is None else torch.as_tensor(labels, dtype=torch.long, device=base.device)

    def swapped_of(params: Tensor) -> dict[str, Tensor]:
        return {name: piece.reshape(shape).to(dtype) for name, piece, shape, dtype
                in zip(names, params.split(sizes), base.param_shapes, dtypes)}

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        swapped = swapped_of(params)
        if trunk is not None:
            last = trunk.logits(model, swapped, inputs.long(), 1, arguments=arguments)[..., -1, :]
            return last.float()[..., label_ids]
        return answer_logits(model, swapped, inputs)[..., label_ids]

    def forward_continuations(params: Tensor, inputs: Tensor) -> Tensor:
        assert continuation is not None
        count, longest = continuation
        rows = inputs.long().reshape(*inputs.shape[:-1], count, -1)
        sequences, lengths = rows[..., :-1].reshape(-1, rows.shape[-1] - 1), rows[..., -1].reshape(-1)
        # The output layer (half the cost) runs at the batch's longest continuation, not the data's.
        longest = min(longest, largest(lengths) or longest)
        swapped = swapped_of(params)
        if trunk is not None:
            logits = trunk.logits(model, swapped, sequences, longest + 1, arguments=arguments).float()
        else:
            logits = answer_logits(model, swapped, sequences, longest + 1)
        return continuation_scores(logits, sequences, lengths).reshape(rows.shape[:-1])

    return replace(
        base, forward=forward if continuation is None else forward_continuations, log_likelihood=likelihood.log_prob, output_hessian=likelihood.output_hessian,
        likelihood=likelihood.name, observation=likelihood, without_last=None,
    )

