"""Texts scored under a language model's posterior predictive: what the pyfunc model of a
``causal_lm`` fit returns (:mod:`bayesflow.tracking.text_pyfunc`).

A text is tokenised as the run's data were (``data.tokenizer``: UTF-8 bytes or the model
folder's tokenizer; :func:`bayesflow.data.text.encode_documents`). Every token after the
first is scored, by the predictive of the evaluation (:mod:`bayesflow.evaluate.tokens`):
p̄(token) the mean over ``n_samples`` posterior members of the softmax, the members
drawn as :meth:`FittedPosterior.predict` draws them (by default the evaluate stage's
draw). Per text: ``tokens`` scored, ``nll`` = −Σ log p̄ (nats), ``nll_per_token``,
``perplexity`` = exp(nll_per_token), and the mean over its tokens of the total, aleatoric
and epistemic uncertainty (:mod:`bayesflow.evaluate.uncertainty`).

A text of at most ``data.length`` tokens is read whole. A longer one is read in windows of
``data.length`` tokens, the windows the model was trained on, every ``stride'`` =
min(``data.stride``, length − 1) tokens, the last window ending at the text's end; each
window scores only the tokens no earlier window scored (:func:`text_windows`), so every
token after the first is scored once, with at least length − stride' tokens before it
beyond the first window. Windows of different lengths go through the model together,
padded on the right (attention is causal: padding is never read by the scored positions).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bayesflow.families import family_of
from bayesflow.posterior.files import PosteriorError

if TYPE_CHECKING:
    from torch import Tensor

    from bayesflow.posterior.fitted import FittedPosterior

__all__ = ["SCORE_COLUMNS", "TEXT_COLUMN", "check_texts", "member_logits", "posterior_members", "score_texts",
           "text_windows"]

TEXT_COLUMN = "text"
SCORE_COLUMNS = (
    "tokens", "nll", "nll_per_token", "perplexity",
    "uncertainty_total", "uncertainty_aleatoric", "uncertainty_epistemic",
)


def text_windows(count: int, length: int, stride: int) -> list[tuple[int, int, int]]:
    """The windows that score a text of ``count`` tokens: (start, end, first scored), each
    window tokens start … end − 1 (at most ``length``) scoring tokens first … end − 1.

    Every token 1 … count − 1 is scored by exactly one window, with at least one token of
    context in it (the step between starts is at most length − 1).
    """
    step = max(1, min(stride, length - 1))
    windows: list[tuple[int, int, int]] = []
    start, scored_from = 0, 1
    while True:
        end = min(start + length, count)
        windows.append((start, end, scored_from))
        if end == count:
            return windows
        scored_from = end
        start = min(start + step, count - length)


def check_texts(texts: Any) -> list[str]:
    """``texts`` as a list of non-empty strings (a DataFrame's ``text`` column, a Series,
    a sequence).

    Raises:
        PosteriorError: no ``text`` column, a value that is not a string, an empty text.
    """
    if hasattr(texts, "columns"):
        if TEXT_COLUMN not in texts.columns:
            raise PosteriorError(
                f"the input has no {TEXT_COLUMN!r} column (its columns: {list(map(str, texts.columns))}); "
                f"pass a DataFrame with the texts to score in a column named {TEXT_COLUMN!r}"
            )
        texts = texts[TEXT_COLUMN]
    values = list(texts.tolist() if hasattr(texts, "tolist") else texts)
    if isinstance(texts, str) or not values:
        raise PosteriorError(f"expected a non-empty list of texts, got {type(texts).__name__}")
    for row, value in enumerate(values):
        if not isinstance(value, str):
            missing = value is None or (isinstance(value, float) and math.isnan(value))  # pandas' NaN
            got = "a missing value" if missing else f"{type(value).__name__} {value!r}"
            raise PosteriorError(f"{TEXT_COLUMN} row {row}: expected a string, got {got}")
        if not value:
            raise PosteriorError(f"{TEXT_COLUMN} row {row}: an empty text has no token to score")
    return values


def score_texts(
    posterior: FittedPosterior, texts: Any, n_samples: int | None = None, seed: int | None = None
) -> dict[str, np.ndarray]:
    """Score each text under a ``causal_lm`` fit's posterior predictive (module docstring).

    Args:
        posterior: a loaded language-model posterior (:func:`bayesflow.load_posterior`).
        texts: strings (a list, a Series, or a DataFrame with a ``text`` column).
        n_samples: posterior members (default the spec's ``evaluate.n_samples``; a point
            estimate uses its one vector).
        seed: seeds the draw; None: the evaluate stage's draw.

    Returns:
        :data:`SCORE_COLUMNS`, each an array with one entry per text.

    Raises:
        PosteriorError: not a language model's posterior, bad texts, or a text of one token.
    """
    from bayesflow.data.text import encode_documents
    from bayesflow.llm.dropout import stochastic_passes
    from bayesflow.posterior.fitted import EVALUATION_SEED_OFFSET

    spec = posterior.spec
    if not family_of(spec).scores_texts:
        raise PosteriorError(f"score_texts scores texts under a causal_lm posterior, not a {spec.model.name!r} one")
    values = check_texts(texts)
    encoded, _ = encode_documents(values, spec.data, spec.model.model_dump(mode="json"), posterior.base_dir)
    for row, ids in enumerate(encoded):
        if ids.shape[0] < 2:
            raise PosteriorError(
                f"{TEXT_COLUMN} row {row}: {values[row]!r} is {ids.shape[0]} token; scoring needs at "
                "least 2 (the first token is context only)"
            )
    problem, members = posterior_members(posterior, n_samples, seed)
    seed = EVALUATION_SEED_OFFSET + (posterior.seed or 0) if seed is None else seed
    with stochastic_passes(posterior.engine, problem.module, int(seed)):  # MC dropout's passes
        return _scores(problem, members, encoded, spec.data.length, spec.data.step)


def posterior_members(
    posterior: FittedPosterior, n_samples: int | None = None, seed: int | None = None
) -> tuple[Any, Tensor]:
    """The run's problem (on the process's frozen model) and the members (k, d) a
    language model's posterior predicts with: ``n_samples`` draws (default the spec's
    ``evaluate.n_samples``; a point estimate gives its one vector), seeded by ``seed``
    (None: the evaluate stage's draw), on the problem's device."""
    import torch

    from bayesflow.evaluate.predictive import draw_samples
    from bayesflow.posterior.fitted import EVALUATION_SEED_OFFSET

    problem, _, _ = posterior._build()
    seed = EVALUATION_SEED_OFFSET + (posterior.seed or 0) if seed is None else seed
    generator = torch.Generator(device=problem.device).manual_seed(int(seed))
    members = draw_samples(posterior.posterior, int(n_samples or posterior.spec.evaluate.n_samples), generator)
    return problem, members.to(problem.device)


def _scores(problem: Any, members: Tensor, encoded: Sequence[np.ndarray], length: int, stride: int) -> dict[str, np.ndarray]:
    """Per-text sums over the scored tokens of every window, in batches sized to the memory
    budget, :data:`~bayesflow.evaluate.tokens.SAMPLE_CHUNK` members at a time."""
    import torch

    from bayesflow.engines.memory import memory_budget, rows_within
    from bayesflow.evaluate.metrics import PROBABILITY_FLOOR
    from bayesflow.evaluate.tokens import SAMPLE_CHUNK, token_statistics

    pieces = [(row, ids[start:end], first - start)
              for row, ids in enumerate(encoded) for start, end, first in text_windows(ids.shape[0], length, stride)]
    pieces.sort(key=lambda piece: piece[1].shape[0])  # similar lengths together: little padding
    vocabulary = int(problem.module.config.vocab_size)
    chunk = min(members.shape[0], SAMPLE_CHUNK)
    per_window = (chunk * 4 + 1) * length * vocabulary * 8  # as evaluate.tokens: float64 copies per member
    rows = rows_within(memory_budget(problem.device), 0, per_window, len(pieces), "the text scores")
    sums = {name: np.zeros(len(encoded)) for name in ("tokens", "nll", "total", "aleatoric", "epistemic")}
    for first in range(0, len(pieces), rows):
        batch = pieces[first : first + rows]
        width = max(window.shape[0] for _, window, _ in batch)
        padded = np.zeros((len(batch), width), dtype=np.int64)  # right padding: never read
        owners, places, labels = [], [], []
        for index, (row, window, scored) in enumerate(batch):
            padded[index, : window.shape[0]] = window
            owners += [row] * (window.shape[0] - scored)
            places += [(index, position - 1) for position in range(scored, window.shape[0])]
            labels += window[scored:].tolist()
        inputs = torch.as_tensor(padded, device=problem.device)
        where = torch.as_tensor(places, device=problem.device).T
        probabilities = _probabilities(problem.logits, members.split(chunk), inputs, where)
        stats = token_statistics(probabilities, torch.as_tensor(labels, device=problem.device))
        owner = np.asarray(owners)
        np.add.at(sums["tokens"], owner, 1.0)
        np.add.at(sums["nll"], owner, -np.log(np.clip(stats["chosen"], PROBABILITY_FLOOR, None)))
        np.add.at(sums["total"], owner, stats["total"])
        np.add.at(sums["aleatoric"], owner, stats["aleatoric"])
        np.add.at(sums["epistemic"], owner, np.maximum(stats["total"] - stats["aleatoric"], 0.0))
    tokens = sums["tokens"]
    per_token = sums["nll"] / tokens
    scores = {"tokens": tokens.astype(np.int64), "nll": sums["nll"], "nll_per_token": per_token,
              "perplexity": np.exp(per_token)}
    scores.update({f"uncertainty_{name}": sums[name] / tokens for name in ("total", "aleatoric", "epistemic")})
    return scores


def _probabilities(logits_of: Any, parts: Sequence[Tensor], inputs: Tensor, where: Tensor) -> Iterator[Tensor]:
    """Each chunk of members' next-token probabilities (k, tokens, V) at the positions
    ``where`` (2, tokens) of the windows ``inputs``."""
    for logits in member_logits(logits_of, parts, inputs, where):
        yield logits.softmax(-1)


def member_logits(logits_of: Any, parts: Sequence[Tensor], inputs: Tensor, where: Tensor) -> Iterator[Tensor]:
    """Each chunk of members' float32 next-token logits (k, tokens, V) at the positions
    ``where`` (2, tokens) of the right-padded windows ``inputs`` (n, L): one ``vmap`` of the
    problem's ``logits`` over a chunk's members (every position's logits are formed)."""
    import torch
    from torch.func import vmap

    width = int(inputs.shape[1])
    for part in parts:
        with torch.no_grad():
            logits = vmap(lambda params: logits_of(params, inputs, width), randomness="different")(part)
        yield logits[:, where[0], where[1]]
