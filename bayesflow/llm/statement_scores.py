"""The last word of each statement under a language model's posterior: its predictive
NLL, the total / aleatoric / epistemic uncertainty, and the AUROC of TU and of EU
separating in-distribution from out-of-distribution statements (issue 23, item 5; the
posteriors paper's Section 5.3, Tables 1 and 2).

The posterior is K member parameter vectors θ₁ … θ_K over the trainable tensors
(:func:`bayesflow.evaluate.draw_samples`; one member for a point estimate). A statement
is a context c and a word w of J tokens w₁ … w_J (:mod:`bayesflow.llm.statements`).
Teacher forcing within the word: position j reads c and the true w₁ … w_{j−1}.

- member k's log probability of the word, by the chain rule,
  ``log p_k(w | c) = Σ_j log p_k(w_j | c, w_<j)``;
- the **NLL** of the word under the predictive, the mean over members of p(w | c)::

      nll = −log (1/K) Σ_k p_k(w | c) = −(logsumexp_k log p_k(w | c) − log K)

- **TU, AU, EU**: the decomposition of :mod:`bayesflow.evaluate.uncertainty` (TU the
  entropy of the members' mean next-token distribution, AU the mean of the members'
  entropies, EU = TU − AU, their mutual information) applied at each of the word's
  positions to the next-token distributions p_k(· | c, w_<j) over the vocabulary, then
  **summed over the word's J positions**: the chain-rule sum of the per-position
  conditional entropies along the true word. A one-token word is the plain
  decomposition of one categorical; every per-position term is ≥ 0, so is the sum, and
  one member gives EU = 0.

Statements of different lengths are batched by padding on the right: attention is
causal, so the padding after a statement never reaches its positions, and each
statement's logits are those of the statement run alone (tested). The members go
through the model vmapped (the frozen layers before the trainable tensors run once for
all members), ``members_per_call`` at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Problem
from bayesflow.evaluate.uncertainty import decompose_uncertainty, ood_auroc
from bayesflow.llm.statements import EncodedStatement

__all__ = ["STATEMENTS_PER_CALL", "StatementScores", "score_statements", "statement_metrics"]

# Statements per forward call. 16 statements of about 100 bytes through the 8.5M-parameter
# byte model of docs/llm.md hold a few MB of activations per member; at a 128k vocabulary
# the float64 next-token distributions of 16 statements' words (≈ 5 tokens each) over 10
# members are ≈ 0.8 GB, so lower it there.
STATEMENTS_PER_CALL = 16


class StatementScores(NamedTuple):
    """Per-statement scores of one statement set under one posterior.

    Attributes:
        log_prob: (K, n) each member's log p_k(word | context), in nats.
        nll: (n,) the predictive's negative log probability of the word.
        total, aleatoric, epistemic: (n,) TU, AU and EU of the word (nats, summed over
            its tokens; see the module docstring).
        tokens: (n,) J, the number of the word's tokens.
    """

    log_prob: np.ndarray
    nll: np.ndarray
    total: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    tokens: np.ndarray


def score_statements(
    problem: Problem,
    members: Tensor,
    statements: Sequence[EncodedStatement],
    statements_per_call: int = STATEMENTS_PER_CALL,
    members_per_call: int | None = None,
) -> StatementScores:
    """Score every statement's last word under the K members.

    Args:
        problem: a language-model problem (:func:`bayesflow.llm.problem.build_lm_problem`).
        members: (K, d) parameter vectors over its trainable tensors.
        statements: the encoded statements (:func:`bayesflow.llm.statements.encode_statements`).
        statements_per_call: statements per forward call (padded to the longest of them).
        members_per_call: members per vmapped call; None: all at once.
    """
    count = len(statements)
    members = members.to(problem.device)
    if members.ndim != 2 or count == 0:
        raise ValueError(f"expected (K, d) members and statements, got {tuple(members.shape)} and {count}")
    log_prob = np.zeros((members.shape[0], count))
    total, aleatoric = np.zeros(count), np.zeros(count)
    # Similar lengths together, so that each call pads little.
    order = sorted(range(count), key=lambda index: statements[index].tokens.shape[0])
    for first in range(0, count, statements_per_call):
        chosen = order[first : first + statements_per_call]
        rows = [statements[index] for index in chosen]
        log_probs, owners, targets = _word_log_probs(problem, members, rows, members_per_call)
        token_log_prob = log_probs.gather(-1, targets.expand(log_probs.shape[0], -1).unsqueeze(-1))[..., 0]
        split = decompose_uncertainty(log_probs.exp())  # (P,) per word position
        where = np.asarray(chosen)[owners.cpu().numpy()]
        np.add.at(log_prob.T, where, token_log_prob.cpu().numpy().T)  # .T: a view
        np.add.at(total, where, split.total)
        np.add.at(aleatoric, where, split.aleatoric)
    mixture = torch.logsumexp(torch.as_tensor(log_prob), dim=0) - math.log(members.shape[0])
    epistemic = np.maximum(total - aleatoric, 0.0)
    tokens = np.array([row.tokens.shape[0] - row.start for row in statements])
    return StatementScores(log_prob, -mixture.numpy(), total, aleatoric, epistemic, tokens)


def _word_log_probs(
    problem: Problem, members: Tensor, rows: Sequence[EncodedStatement], members_per_call: int | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The members' float64 next-token log probabilities at every word position of
    ``rows`` (K, P, V), the row each position belongs to (P,) and its true token (P,)."""
    length = max(row.tokens.shape[0] for row in rows)
    padded = np.zeros((len(rows), length), dtype=np.int64)  # right padding: never read
    for index, row in enumerate(rows):
        padded[index, : row.tokens.shape[0]] = row.tokens
    # The logit at position t predicts token t + 1: the word's tokens start..end−1 are
    # predicted by positions start−1..end−2; keep the last positions from the earliest.
    earliest = min(row.start for row in rows) - 1
    keep = length - earliest
    owners, positions, targets = [], [], []
    for index, row in enumerate(rows):
        for position in range(row.start, row.tokens.shape[0]):
            owners.append(index)
            positions.append(position - 1 - earliest)
            targets.append(int(row.tokens[position]))
    device = problem.device
    inputs = torch.as_tensor(padded, device=device)
    owner = torch.as_tensor(owners, device=device)
    place = torch.as_tensor(positions, device=device)
    logits_of = problem.logits
    assert logits_of is not None, "statements are scored under a language-model problem"

    def picked(params: Tensor) -> Tensor:
        return logits_of(params, inputs, keep, at=(owner, place))  # (P, V)

    step = members_per_call or members.shape[0]
    with torch.no_grad():
        chunks = [vmap(picked, randomness="different")(part) for part in members.split(step)]
    log_probs = torch.cat(chunks).double().log_softmax(-1)
    return log_probs, owner, torch.as_tensor(targets, device=device)


def statement_metrics(inside: StatementScores, outside: StatementScores, name: str = "ood") -> dict[str, float]:
    """The summary of an in-distribution and an out-of-distribution set named ``name``:
    the mean NLL, TU, AU and EU of each (``statements_nll_in``, ``statements_tu_<name>``,
    ...) and the AUROC of TU and of EU telling OOD (label 1) from in-distribution (label
    0), ``statements_auroc_tu`` and ``statements_auroc_eu`` (0.5 is chance; one member
    gives EU = 0 everywhere, so an AUROC of EU of exactly 0.5); and the AUROC of TU and
    of EU per token of the word (divided by J), ``statements_auroc_tu_per_token`` and
    ``statements_auroc_eu_per_token``: a sum over the word's tokens grows with its length,
    which varies between statements as much as between the sets (a cipher keeps every
    length), so the per-token score compares the words' uncertainty without it. The
    AUROCs of a set not named ``ood`` end in ``_<name>`` (``statements_auroc_eu_cipher``)."""
    metrics: dict[str, float] = {}
    for suffix, scores in (("in", inside), (name, outside)):
        for kind, values in (("nll", scores.nll), ("tu", scores.total),
                             ("au", scores.aleatoric), ("eu", scores.epistemic)):
            metrics[f"statements_{kind}_{suffix}"] = float(np.mean(values))
    end = "" if name == "ood" else f"_{name}"
    metrics[f"statements_auroc_tu{end}"] = ood_auroc(inside.total, outside.total)
    metrics[f"statements_auroc_eu{end}"] = ood_auroc(inside.epistemic, outside.epistemic)
    metrics[f"statements_auroc_tu_per_token{end}"] = ood_auroc(inside.total / inside.tokens,
                                                               outside.total / outside.tokens)
    metrics[f"statements_auroc_eu_per_token{end}"] = ood_auroc(inside.epistemic / inside.tokens,
                                                               outside.epistemic / outside.tokens)
    return metrics
