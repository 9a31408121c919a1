"""The posterior predictive of a causal language model on held-out windows, token by token.

A window's outputs are (S, V) logits of its S scored tokens; every scored token of every
window is one point, so the classification metrics keep their conventions with n × S
points: ``test_nll`` is the mean over scored tokens of −log p̄(token), p̄ the average over
posterior samples of the softmax; ``test_accuracy``, ``test_ece``, ``test_brier`` and the
``_single`` versions likewise, and ``test_perplexity`` = exp(test_nll).

The (samples, windows, S, V) probabilities are never held whole: windows go through the
model a chunk at a time, sized to the memory budget (:mod:`bayesflow.engines.memory`),
:data:`SAMPLE_CHUNK` samples at a time, each reduced at once to a few numbers per token and
sample and a running sum over samples (the predictive).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Problem
from bayesflow.evaluate import metrics
from bayesflow.evaluate.conventions import describe

__all__ = ["SAMPLE_CHUNK", "TOKEN_NOTE", "evaluate_tokens", "token_statistics"]

TOKEN_NOTE = "every scored token of every held-out window is one point"
# Samples whose (samples, tokens, V) probabilities one step holds (the forward still
# batches every sample of a chunk under vmap); and the float64 copies of them alive at
# once (probabilities, logs, products) plus the float32 logits and the running sum.
SAMPLE_CHUNK = 8
_COPIES = 4


def _reduce(values: Tensor, labels: Tensor) -> dict[str, Tensor]:
    """Per-token numbers of (..., m, V) probabilities and (m,) labels: the probability of
    the label, argmax hit, confidence, Brier term and entropy, each (..., m)."""
    index = labels.long().reshape(*([1] * (values.ndim - 2)), -1, 1).expand(*values.shape[:-1], 1)
    chosen = values.gather(-1, index).squeeze(-1)
    return {"chosen": chosen, "hit": (values.argmax(-1) == labels).double(), "confidence": values.amax(-1),
            "brier": values.square().sum(-1) - 2 * chosen + 1,
            "entropy": -(values * values.clamp_min(1e-300).log()).sum(-1)}


def token_statistics(sample_probs: Iterable[Tensor], labels: Tensor) -> dict[str, np.ndarray]:
    """Per-token numbers of sample probabilities given in chunks of (k, m, V) and (m,)
    labels: the predictive's (the mean over samples) probability of the label, argmax
    hit, confidence, Brier term and total uncertainty (m,), the aleatoric uncertainty (m,)
    and each sample's numbers (K, m)."""
    total: Tensor | None = None
    each: dict[str, list[Tensor]] = {}
    for chunk in sample_probs:
        probs = chunk.double()
        total = probs.sum(0) if total is None else total + probs.sum(0)
        for name, value in _reduce(probs, labels).items():
            each.setdefault(name, []).append(value)
    assert total is not None, "at least one sample"
    per_sample = {name: torch.cat(values) for name, values in each.items()}
    stats = _reduce(total / per_sample["chosen"].shape[0], labels)
    stats["total"], stats["aleatoric"] = stats.pop("entropy"), per_sample.pop("entropy").mean(0)
    stats.update({f"{name}_each": value for name, value in per_sample.items()})
    return {name: value.cpu().numpy() for name, value in stats.items()}


def _scores(stats: dict[str, np.ndarray], suffix: str, bins: int, binning: str) -> dict[str, float]:
    chosen = np.clip(stats[f"chosen{suffix}"], metrics.PROBABILITY_FLOOR, None)
    return {
        "test_nll": float(-np.log(chosen).mean()),
        "test_accuracy": float(stats[f"hit{suffix}"].mean()),
        "test_ece": metrics.calibration_error(stats[f"confidence{suffix}"], stats[f"hit{suffix}"], bins, binning),
        "test_brier": float(stats[f"brier{suffix}"].mean()),
    }


def evaluate_tokens(
    problem: Problem, samples: Tensor, x_test: Tensor, y_test: Tensor, ece_bins: int = 10, *,
    ece_binning: str = "equal_width", outputs_of: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, str]]:
    """Metrics, per-token arrays and conventions of a language model's predictive on
    windows ``x_test`` (n, L) with scored tokens ``y_test`` (n, S).

    Args:
        problem: the language model's problem (its forward gives (..., n, S, V) logits).
        samples: (K, d) posterior samples (:func:`bayesflow.evaluate.draw_samples`).
        x_test, y_test: the windows and their scored tokens.
        ece_bins, ece_binning: the ECE's bins.
        outputs_of: ``(samples, windows) -> (K, windows, S, V)`` logits (default: the
            problem's forward vmapped over the samples).

    Returns:
        ``test_nll``, ``test_accuracy``, ``test_ece``, ``test_brier``, their ``_single``
        versions and ``test_perplexity``; the arrays ``labels`` and
        ``uncertainty_total``/``_aleatoric``/``_epistemic`` (n × S,); the conventions.
    """
    from bayesflow.engines.memory import memory_budget, rows_within

    if outputs_of is None:
        outputs_of = vmap(problem.forward, in_dims=(0, None), randomness="different")
    windows, scored = y_test.shape
    vocabulary = int(problem.module.config.vocab_size)  # type: ignore[union-attr,arg-type]  # a language model's
    chunk = min(samples.shape[0], SAMPLE_CHUNK)
    per_window = (chunk * _COPIES + 1) * scored * vocabulary * 8
    rows = rows_within(memory_budget(problem.device), 0, per_window, windows, "the token predictive")
    pieces: dict[str, list[np.ndarray]] = {}
    for start in range(0, windows, rows):
        inputs = x_test[start : start + rows].to(problem.device)

        def probabilities(inputs: Tensor = inputs) -> Iterator[Tensor]:
            for piece in samples.split(chunk):
                with torch.no_grad():
                    yield outputs_of(piece, inputs).softmax(-1).flatten(1, 2)  # (k, windows × S, V)

        labels = y_test[start : start + rows].reshape(-1).to(problem.device)
        for name, value in token_statistics(probabilities(), labels).items():
            pieces.setdefault(name, []).append(value)
    stats = {name: np.concatenate(values, axis=-1) for name, values in pieces.items()}
    scores = _scores(stats, "", ece_bins, ece_binning)
    each = [_scores({name.removesuffix("_each"): value[k] for name, value in stats.items() if name.endswith("_each")},
                    "", ece_bins, ece_binning) for k in range(samples.shape[0])]
    scores.update({f"{name}_single": float(np.mean([m[name] for m in each])) for name in each[0]})
    scores["test_perplexity"] = math.exp(scores["test_nll"])
    epistemic = np.maximum(stats["total"] - stats["aleatoric"], 0.0)
    arrays = {"labels": y_test.reshape(-1).cpu().numpy(), "uncertainty_total": stats["total"],
              "uncertainty_aleatoric": stats["aleatoric"], "uncertainty_epistemic": epistemic}
    conventions = {name: f"{line}; {TOKEN_NOTE}" for name, line in describe(scores, ece_bins, ece_binning).items()}
    conventions["test_perplexity"] = f"exp(test_nll): the predictive's perplexity per scored token; {TOKEN_NOTE}"
    return scores, arrays, conventions
