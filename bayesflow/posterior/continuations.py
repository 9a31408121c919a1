"""Continuations scored under a language model's posterior, member by member: what an
lm-eval ``loglikelihood`` request asks of a posterior (:mod:`bayesflow.posterior.harness`).

A piece is a window of token ids and the index of its first scored token: the model reads
the window without its last token and the positions ``first − 1 … end − 2`` predict the
tokens ``first … end − 1`` (lm-eval's convention: the input is the context and the
continuation less its last token). For every member θₘ and piece the sum of
log p(token | θₘ) over its scored tokens comes back, so a caller can average whole
sequences over members (:func:`mean_log_probability`); and whether every scored token is
the argmax of the members' mean next-token distribution p̄ = (1/M) Σₘ p(· | θₘ), the
posterior predictive's greedy choice at each position given the true prefix.

The forward is the problem's own (:func:`bayesflow.posterior.texts.member_logits`: one
``vmap`` over a chunk of members); windows of different lengths go through together,
padded on the right (causal attention: the scored positions never read the padding).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["ContinuationScores", "continuation_scores", "mean_log_probability"]


class ContinuationScores(NamedTuple):
    """``log_probs`` (M, n): each member's summed log-probability of each piece's scored
    tokens (float64; 0 for a piece with none); ``greedy`` (n,): every scored token is the
    argmax of the members' mean next-token distribution."""

    log_probs: np.ndarray
    greedy: np.ndarray


def mean_log_probability(log_probs: np.ndarray) -> np.ndarray:
    """log (1/M) Σₘ exp(ℓₘ) over the members' axis 0 of (M, n) summed log-probabilities:
    the log of the posterior-mean probability of each whole sequence (logsumexp, so a
    sequence of −500 nats stays finite)."""
    values = np.asarray(log_probs, dtype=np.float64)
    top = values.max(axis=0)
    return np.asarray(top + np.log(np.exp(values - top).sum(axis=0)) - math.log(values.shape[0]))


def continuation_scores(problem: Any, members: Tensor, pieces: Sequence[tuple[np.ndarray, int]]) -> ContinuationScores:
    """Score ``pieces`` (window ids, first scored index) under each member (module docstring).

    Args:
        problem: a language model's problem (its ``logits`` and ``module``).
        members: (M, d) flat parameter vectors, on the problem's device.
        pieces: each a window of at most the model's context + 1 token ids and the index of
            its first scored token (at least 1).

    Returns:
        :class:`ContinuationScores`, one column per piece in the order given.
    """
    from bayesflow.engines.memory import memory_budget, rows_within
    from bayesflow.evaluate.tokens import SAMPLE_CHUNK

    count = members.shape[0]
    log_probs = np.zeros((count, len(pieces)))
    greedy = np.ones(len(pieces), dtype=bool)
    scored = [index for index, (window, first) in enumerate(pieces) if first < len(window)]
    if not scored:
        return ContinuationScores(log_probs, greedy)
    scored.sort(key=lambda index: len(pieces[index][0]))  # similar lengths together: little padding
    vocabulary = int(problem.module.config.vocab_size)
    chunk = min(count, SAMPLE_CHUNK)
    width = max(len(pieces[index][0]) for index in scored) - 1
    # float32 logits of every position for a chunk of members, their float64 log-softmax and
    # the running log-sum of the mean: as evaluate.tokens sizes its pass.
    per_window = (chunk * 3 + 1) * width * vocabulary * 8
    rows = rows_within(memory_budget(problem.device), 0, per_window, len(scored), "the continuation scores")
    for start in range(0, len(scored), rows):
        batch = scored[start : start + rows]
        _score_batch(problem, members.split(chunk), [pieces[index] for index in batch], batch, log_probs, greedy)
    return ContinuationScores(log_probs, greedy)


def _score_batch(
    problem: Any, parts: Sequence[Tensor], pieces: Sequence[tuple[np.ndarray, int]], columns: list[int],
    log_probs: np.ndarray, greedy: np.ndarray,
) -> None:
    """Fill the ``columns`` of ``log_probs`` and ``greedy`` for one batch of pieces."""
    import torch

    from bayesflow.posterior.texts import member_logits

    device = problem.device
    width = max(len(window) - 1 for window, _ in pieces)
    padded = np.zeros((len(pieces), width), dtype=np.int64)  # right padding: never read
    owners: list[int] = []
    places: list[tuple[int, int]] = []
    labels: list[int] = []
    for row, (window, first) in enumerate(pieces):
        padded[row, : len(window) - 1] = window[:-1]
        owners += [columns[row]] * (len(window) - first)
        places += [(row, position - 1) for position in range(first, len(window))]
        labels += [int(token) for token in window[first:]]
    inputs = torch.as_tensor(padded, device=device)
    where = torch.as_tensor(places, device=device).T
    targets = torch.as_tensor(labels, device=device)
    chosen, log_mean = [], None
    for logits in member_logits(problem.logits, parts, inputs, where):
        log_softmax = logits.double().log_softmax(-1)  # (k, tokens, V)
        chosen.append(log_softmax.gather(-1, targets.expand(log_softmax.shape[0], -1)[..., None])[..., 0])
        summed = log_softmax.logsumexp(0)  # log Σₘ p: the argmax of the mean, without the 1/M
        log_mean = summed if log_mean is None else torch.logaddexp(log_mean, summed)
    assert log_mean is not None
    each = torch.cat(chosen).cpu().numpy()  # (M, tokens)
    owner = np.asarray(owners)
    for member in range(each.shape[0]):
        np.add.at(log_probs[member], owner, each[member])
    hits = (log_mean.argmax(-1) == targets).cpu().numpy()
    np.logical_and.at(greedy, owner, hits)
