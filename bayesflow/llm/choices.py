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
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.func import functional_call

from bayesflow.engines.base import Problem
from bayesflow.llm.likelihood import MultipleChoice
from bayesflow.llm.problem import build_lm_problem, trainable_values
from bayesflow.llm.trunk import PADDING, kept_budget, largest, split_trunk, trimmed
from bayesflow.priors import Prior

__all__ = ["Scored", "answer_logits", "build_choice_problem", "continuation_scores", "packed_arguments",
           "padding_arguments", "scored_positions"]


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


def packed_arguments(rows: Tensor, count: int, dtype: torch.dtype) -> dict[str, Tensor]:
    """``input_ids``, ``position_ids`` and the 4-D ``attention_mask`` of questions packed
    with their ``count`` continuations (:func:`~bayesflow.data.multiple_choice.continuation_rows`:
    left-padded ``prompt + continuation₁ + … + continuation_C`` ids, then the C lengths).

    Each continuation sees the prompt and itself, never another continuation, and its
    tokens take the positions that follow the prompt, so each choice's tokens get what the
    sequence ``prompt + continuation_c`` alone gives them: the C sequences of a question
    share the prompt's computation (the trunk's and the trainable layers')."""
    ids, lengths = rows[..., :-count], rows[..., -count:]
    real = ids >= 0
    width = ids.shape[-1]
    index = torch.arange(width, device=rows.device)
    offset = index - (width - lengths.sum(-1, keepdim=True))  # into the continuations; < 0 before them
    ends = lengths.cumsum(-1)
    segment = torch.where(offset >= 0, 1 + (offset.unsqueeze(-1) >= ends.unsqueeze(-2)).sum(-1),
                          torch.zeros_like(offset))  # 0: prompt (or padding), c + 1: continuation c
    starts = (ends - lengths).gather(-1, (segment - 1).clamp(min=0))
    prompt = real.sum(-1, keepdim=True) - lengths.sum(-1, keepdim=True)
    positions = torch.where(segment > 0, prompt + offset - starts, (real.long().cumsum(-1) - 1).clamp(min=0))
    causal = index[:, None] >= index[None, :]
    itself = index[:, None] == index[None, :]
    same = (segment.unsqueeze(-1) == segment.unsqueeze(-2)) | (segment == 0).unsqueeze(-2)
    allowed = (causal & real.unsqueeze(-2) & same) | itself
    mask = torch.zeros(allowed.shape, dtype=dtype, device=rows.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return {"input_ids": ids.clamp(min=0), "position_ids": positions, "attention_mask": mask.unsqueeze(-3)}


@dataclass(frozen=True)
class Scored:
    """Where a batch of packed questions is scored (:func:`scored_positions`)."""

    sources: Tensor  # (P,) the flat (question × position) indices whose next-token logits are needed
    slots: Tensor  # (..., S) for each continuation token, its source among ``sources``
    tokens: Tensor  # (..., S) the continuation tokens
    choices: Tensor  # (..., S) each token's choice, -1 past the question's continuations


def scored_positions(rows: Tensor, count: int, longest: int, sources: int) -> Scored:
    """The positions of packed questions (n, L + C) whose next-token logits score their
    continuations: each prompt's last (it predicts every continuation's first token) and
    every continuation token but each continuation's last, ``sources`` (P) of them over the
    whole batch, as flat indices into its n × L positions (a batch that needs fewer repeats
    one, never read); and the ``longest`` (S, the batch's most) continuation tokens of each
    question with their source's index among the P, their token and their choice."""
    ids, lengths = rows[..., :-count], rows[..., -count:]
    width = ids.shape[-1]
    total = lengths.sum(-1, keepdim=True)
    ends = lengths.cumsum(-1)
    candidates = torch.arange(-1, longest, device=rows.device).expand(*total.shape[:-1], longest + 1)
    is_end = (candidates.unsqueeze(-1) == (ends - 1).unsqueeze(-2)).any(-1)
    wanted = ((candidates == -1) | ((candidates < total) & ~is_end)).flatten()
    question = torch.arange(ids.shape[0], device=rows.device).unsqueeze(-1)
    flat = (question * width + (width - total + candidates).clamp(0, width - 1)).flatten()
    order = torch.argsort((~wanted).long(), stable=True)[:sources]
    rank = (wanted.long().cumsum(0) - 1).reshape(candidates.shape)  # a wanted candidate's place among them
    target = candidates[..., 1:]  # 0 … S − 1
    choice = (target.unsqueeze(-1) >= ends.unsqueeze(-2)).sum(-1).clamp(max=count - 1)
    first = target == (ends - lengths).gather(-1, choice)
    source = torch.where(first, torch.full_like(target, -1), target - 1)  # its candidate is source + 1
    slots = rank.gather(-1, source + 1).clamp(0, sources - 1)
    tokens = ids.gather(-1, (width - total + target).clamp(0, width - 1)).clamp(min=0)
    return Scored(flat[order], slots, tokens, torch.where(target < total, choice, torch.full_like(choice, -1)))


def continuation_scores(logits: Tensor, scored: Scored, count: int) -> Tensor:
    """(n, C) each continuation's summed log-probability, from the (P, V) logits at
    ``scored.sources``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    per_token = log_probs[scored.slots, scored.tokens]
    owner = scored.choices.unsqueeze(-1) == torch.arange(count, device=logits.device)
    return (per_token.unsqueeze(-1) * owner).sum(-2)


# Prompts per forward call when a large batch (an evaluation's, a curvature's) is run in
# order of length: each call is cut to its own longest prompt.
LENGTH_GROUP = 16


def in_length_order(forward: Callable[[Tensor, Tensor], Tensor], params: Tensor, inputs: Tensor,
                    trailing: int = 0) -> Tensor:
    """``forward(params, inputs)`` for a batch of left-padded prompts (``trailing`` columns
    that are not tokens end each row) run :data:`LENGTH_GROUP` prompts at a time in order
    of length, each group cut to its longest (:func:`~bayesflow.llm.trunk.trimmed`), the
    outputs put back in the batch's order: an evaluation of hundreds of questions pays for
    each question's tokens, not the longest question's. Only without gradients (the
    predictive's passes): a fit's or a curvature's forward runs its batch at once (KFAC's
    hooks need each layer applied once a pass). A batch of at most one group, or one
    batched per chain under ``vmap`` (each chain's own rows), runs as it is too."""
    if (torch.is_grad_enabled() or inputs.shape[0] <= LENGTH_GROUP or is_functorch_wrapped_tensor(inputs)
            or torch.compiler.is_compiling()):
        return forward(params, inputs)
    tokens = inputs[:, : inputs.shape[-1] - trailing] if trailing else inputs
    order = torch.argsort((tokens != PADDING).sum(-1), stable=True)
    outputs = torch.cat([forward(params, inputs[rows]) for rows in order.split(LENGTH_GROUP)], dim=-2)
    return outputs[..., torch.argsort(order), :]


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

    With ``continuation = (C, S)`` (``scoring: continuation``) the inputs are instead
    :func:`~bayesflow.data.multiple_choice.continuation_rows` (n, L + C): each question's
    prompt packed with its C continuations (:func:`packed_arguments`: each sees the prompt
    and itself), then their lengths; the logits (n, C) are each continuation's summed
    log-probability (:func:`continuation_scores`), the output layer run only at the
    positions that predict a continuation token (:func:`scored_positions`). A softmax of
    them is lm-eval's ``acc`` choice among the C sequences ``prompt + continuation_c``,
    which share the prompt's computation here.

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
        continuation: (C, S), the choices per question and the most continuation tokens
            of a question (all its choices'), to score continuations; None scores label tokens.
    """
    base = build_lm_problem(model, names, prior, num_data, 1, device)
    trunk = split_trunk(model, names, kept_budget(base.device)) if share_trunk else None
    dtype = next(model.parameters()).dtype

    def arguments(inputs: Tensor) -> dict[str, Tensor]:
        return padding_arguments(inputs, dtype)

    def packed(rows: Tensor) -> dict[str, Tensor]:
        assert continuation is not None
        return packed_arguments(rows, continuation[0], dtype)

    likelihood = MultipleChoice(length_columns=0 if continuation is None else continuation[0])
    tensors = trainable_values(model, names)
    dtypes = tuple(value.dtype for value in tensors.values())
    sizes = [math.prod(shape) for shape in base.param_shapes]
    label_ids = None if labels is None else torch.as_tensor(labels, dtype=torch.long, device=base.device)

    def swapped_of(params: Tensor) -> dict[str, Tensor]:
        return {name: piece.reshape(shape).to(dtype) for name, piece, shape, dtype
                in zip(names, params.split(sizes), base.param_shapes, dtypes)}

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        swapped = swapped_of(params)
        inputs = trimmed(inputs)  # the padding every prompt of the batch has, gone
        if trunk is not None:
            last = trunk.logits(model, swapped, inputs.long(), 1, arguments=arguments)[..., -1, :]
            return last.float()[..., label_ids]
        return answer_logits(model, swapped, inputs)[..., label_ids]

    def forward_continuations(params: Tensor, inputs: Tensor) -> Tensor:
        assert continuation is not None
        count, most = continuation
        rows = trimmed(inputs.long(), count)
        totals = rows[..., -count:].sum(-1)
        # The batch's own sizes (not the data's): the output layer, at 49k words, is the
        # cost, so it runs only where a continuation token is predicted.
        longest = min(most, largest(totals) or most)
        needed = largest((totals - count + 1).sum(-1, keepdim=True)) or rows.shape[0] * (longest + 1)
        scored = scored_positions(rows, count, longest, needed)
        swapped = swapped_of(params)
        if trunk is not None:
            logits = trunk.logits(model, swapped, rows, 0, at=scored.sources, arguments=packed).float()
        else:
            options = {**packed(rows), "use_cache": False}
            every = functional_call(model, swapped, (), options, strict=False).logits.float()
            logits = every.flatten(0, 1)[scored.sources]
        return continuation_scores(logits, scored, count)

    one = forward if continuation is None else forward_continuations
    trailing = 0 if continuation is None else continuation[0]

    def by_length(params: Tensor, inputs: Tensor) -> Tensor:
        return in_length_order(one, params, inputs, trailing)

    return replace(
        base, forward=by_length, log_likelihood=likelihood.log_prob, output_hessian=likelihood.output_hessian,
        likelihood=likelihood.name, observation=likelihood, without_last=None,
    )

