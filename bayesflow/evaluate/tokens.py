"""The posterior predictive of a causal language model on held-out windows, token by token.

A window's outputs are (S, V) logits of its S scored tokens; every scored token of every
window is one point, so the classification metrics keep their conventions with n × S
points: ``test_nll`` is the mean over scored tokens of −log p̄(token), p̄ the average over
posterior samples of the softmax; ``test_accuracy``, ``test_ece``, ``test_brier`` and the
``_single`` versions likewise, and ``test_perplexity`` = exp(test_nll).

The (samples, windows, S, V) probabilities are never held whole: windows go through the
model a chunk at a time, sized to the memory budget (:mod:`bayesflow.engines.memory`),
and each chunk is reduced to a few numbers per token and sample at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Problem
from bayesflow.evaluate import metrics
from bayesflow.evaluate.conventions import describe

__all__ = ["TOKEN_NOTE", "evaluate_tokens", "token_statistics"]

TOKEN_NOTE = "every scored token of every held-out window is one point"
# Float64 copies of a chunk's (samples, tokens, V) probabilities alive at once (probabilities,
# their logs, the products), plus the float32 logits.
_COPIES = 4


def token_statistics(sample_probs: Tensor, labels: Tensor) -> dict[str, np.ndarray]:
    """Per-token numbers of (K, m, V) sample probabilities and (m,) labels: the
    predictive's probability of the label, argmax hit, confidence, Brier term and
    total/aleatoric uncertainty (m,), and each sample's (K, m)."""
    probs = sample_probs.double()
    mean = probs.mean(0)
    index = labels.long().reshape(1, -1, 1)

    def reduce(values: Tensor, rows: Tensor) -> dict[str, Tensor]:
        chosen = values.gather(-1, rows.expand(*values.shape[:-1], 1)).squeeze(-1)
        return {"chosen": chosen, "hit": (values.argmax(-1) == labels).double(),
                "confidence": values.amax(-1), "brier": values.square().sum(-1) - 2 * chosen + 1}

    def entropy(values: Tensor) -> Tensor:
        return -(values * values.clamp_min(1e-300).log()).sum(-1)

    stats = {name: value for name, value in reduce(mean, index[0]).items()}
    stats.update({f"{name}_each": value for name, value in reduce(probs, index.expand(probs.shape[0], -1, 1)).items()})
    stats["total"], stats["aleatoric"] = entropy(mean), entropy(probs).mean(0)
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
        outputs_of = vmap(problem.forward, in_dims=(0, None))
    windows, scored = y_test.shape
    vocabulary = int(problem.forward.language_model.config.vocab_size)  # type: ignore[attr-defined]
    per_window = samples.shape[0] * scored * vocabulary * 8 * _COPIES
    rows = rows_within(memory_budget(problem.device), 0, per_window, windows, "the token predictive")
    pieces: dict[str, list[np.ndarray]] = {}
    for start in range(0, windows, rows):
        with torch.no_grad():
            outputs = outputs_of(samples, x_test[start : start + rows].to(problem.device))
        probs = outputs.softmax(-1).flatten(1, 2)  # (K, windows × S, V)
        for name, value in token_statistics(probs, y_test[start : start + rows].reshape(-1)).items():
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
