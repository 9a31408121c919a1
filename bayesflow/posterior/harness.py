"""A fitted language-model posterior as an lm-evaluation-harness model (the ``lmeval``
extra: ``pip install 'bayesflow-workflows[lmeval]'``).

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from bayesflow.posterior.harness import PosteriorLM

    lm = PosteriorLM("<fit run id or posterior folder>", members=8)
    results = simple_evaluate(model=lm, tasks=["my_task"],
                              task_manager=TaskManager(include_path="tasks/"))

Importing this module registers :class:`PosteriorLM` with lm-eval as ``bayesflow``
(``simple_evaluate(model="bayesflow", model_args="run=<id>,members=8")``);
``bayesflow lm-eval RUN --tasks T`` runs it from the command line
(:mod:`bayesflow.posterior.harness_tasks` adds ECE, NLL and Brier over the choices).

Text becomes tokens with the run's own tokenizer (``data.tokenizer``: UTF-8 bytes, or the
model folder's tokenizer), through lm-eval's split of a context and its continuation
(``TemplateLM``: the context's trailing spaces move to the continuation; the pair is
encoded whole and the continuation is what follows the context's own tokens). An empty
context is the prefix token: with a folder's tokenizer its BOS, else its EOS, else the model
config's, else a newline (the shipped byte-level checkpoint has no special token); with
``tokenizer: bytes`` a newline (the byte ids have no special token).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from bayesflow.errors import MissingDependencyError, TaskError
from bayesflow.families import family_of
from bayesflow.posterior.files import PosteriorError

if TYPE_CHECKING:
    from bayesflow.posterior.fitted import FittedPosterior

__all__ = ["INSTALL", "MODEL_NAME", "PosteriorLM", "require_lm_eval"]

INSTALL = "pip install 'bayesflow-workflows[lmeval]'"
MODEL_NAME = "bayesflow"
SUPPORTED = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")


def require_lm_eval() -> ModuleType:
    """Import ``lm_eval``, or raise a :class:`MissingDependencyError` with the install command."""
    try:
        return importlib.import_module("lm_eval")
    except ImportError as error:
        raise MissingDependencyError(
            "scoring a posterior on lm-eval tasks needs lm-evaluation-harness (lm-eval 0.4.13), "
            f"the optional `lmeval` extra; install it with `{INSTALL}`"
        ) from error


require_lm_eval()
import lm_eval.models  # noqa: F401  # its lazy table first: lm-eval fills only an empty registry
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window


@register_model(MODEL_NAME)
class PosteriorLM(TemplateLM):  # type: ignore[misc]  # lm-eval is untyped
    """An lm-eval model whose probabilities are a fitted posterior's predictive.

    ``loglikelihood`` of a continuation y given a context x is log p̄(y | x) with
    p̄(y | x) = (1/M) Σₘ Πₜ p(yₜ | x, y<ₜ, θₘ): each member's probability of the *whole*
    continuation, averaged over the M members (a logsumexp of the members' summed token
    log-probabilities, minus log M). It is sequence-level because a posterior predicts
    with one θ at a time: a member writes the whole continuation, so the predictive of a
    multi-token answer is the mixture of the members' sequence probabilities, not the product
    of per-token means (which would let every token pick its own member, and is not a
    probability of the sequence under any one model the posterior holds). For a
    one-token continuation the two agree. ``is_greedy``: every continuation token is the
    argmax of the members' mean next-token distribution given the true prefix.
    ``loglikelihood_rolling`` is the same mixture over the whole text, read in lm-eval's
    rolling windows of the model's context (each token scored once, the first after the
    prefix token). ``generate_until`` is refused: bayesflow scores text, it does not
    generate it.

    Args:
        posterior: a :class:`~bayesflow.posterior.FittedPosterior`, or what
            :func:`bayesflow.load_posterior` reads (a fit run id, a posterior folder).
        run: the same, by keyword (lm-eval's ``model_args="run=..."``).
        members: M, posterior members drawn (default the run's ``evaluate.n_samples``; a
            point estimate is its one vector).
        seed: seeds the draw (default the evaluate stage's draw).
        tracking_uri: the MLflow store of a run id.
        device: where the model runs (``cpu``, ``cuda``).
        max_length: the longest input window (default the model's context).
        prefix_token_id: the token an empty context is (default above).
        batch_size: accepted for lm-eval's command line; batches are sized to the memory
            budget (``BAYESFLOW_MEMORY_LIMIT``).

    Raises:
        PosteriorError: the posterior cannot be loaded, or is not a language model's.
    """

    def __init__(
        self,
        posterior: FittedPosterior | str | Path | None = None,
        *,
        run: str | None = None,
        members: int | str | None = None,
        seed: int | str | None = None,
        tracking_uri: str | None = None,
        device: str | None = None,
        max_length: int | str | None = None,
        prefix_token_id: int | str | None = None,
        batch_size: Any = None,
        max_batch_size: Any = None,
    ) -> None:
        super().__init__()
        from bayesflow.llm.problem import context_of
        from bayesflow.posterior.fitted import EVALUATION_SEED_OFFSET
        from bayesflow.posterior.load import load_posterior
        from bayesflow.posterior.texts import posterior_members

        source = posterior if posterior is not None else run
        if source is None:
            raise PosteriorError("PosteriorLM: pass the posterior (a fit run id or folder, or a loaded posterior)")
        if isinstance(source, (str, Path)):
            source = load_posterior(source, tracking_uri=tracking_uri, device=device or "cpu")
        spec = source.spec
        if not family_of(spec).scores_texts:
            raise PosteriorError(
                f"lm-eval scores text under a language model's posterior, but this run's model is "
                f"{spec.model.name!r} (it reads features, not tokens); pass the fit of a run whose "
                "model is `causal_lm`"
            )
        self.posterior = source
        self.problem, self.members = posterior_members(
            source, None if members is None else int(members), None if seed is None else int(seed))
        self._encode, self._prefix = _tokenizer(source, self.problem.module, prefix_token_id)
        self._max_length = int(max_length) if max_length is not None else context_of(self.problem.module)
        self._device = self.problem.device
        self._seed = EVALUATION_SEED_OFFSET + (source.seed or 0) if seed is None else int(seed)

    def _scores(self, pieces: list[Any]) -> Any:
        """Each member's scores of ``pieces`` (MC dropout's members as seeded dropout passes)."""
        from bayesflow.llm.dropout import stochastic_passes
        from bayesflow.posterior.continuations import continuation_scores

        with stochastic_passes(self.posterior.engine, self.problem.module, self._seed):
            return continuation_scores(self.problem, self.members, pieces)

    # -------------------------------------------------------- lm-eval's hooks

    @property
    def eot_token_id(self) -> int:
        return self._prefix

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def max_length(self) -> int:
        """The longest window the model reads (lm-eval truncates contexts on the left to it)."""
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return f"bayesflow-{getattr(self.posterior.spec.data, 'tokenizer', 'model')}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """The run's tokens of ``string`` (no special token is ever added: the run's
        windows had none)."""
        return [int(token) for token in self._encode(string)]

    def _loglikelihood_tokens(self, requests: list[Any], disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """Score ``((context, continuation), context ids, continuation ids)`` requests: the
        window is the last ``max_length`` + 1 tokens of both (lm-eval's left truncation)."""
        from bayesflow.posterior.continuations import mean_log_probability

        pieces = [self._piece(list(context), list(continuation)) for _, context, continuation in requests]
        scores = self._scores(pieces)
        answers = [(float(value), bool(greedy))
                   for value, greedy in zip(mean_log_probability(scores.log_probs), scores.greedy)]
        for (pair, _, _), answer in zip(requests, answers):
            if pair is not None:
                self.cache_hook.add_partial("loglikelihood", pair, answer)
        return answers

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """log p̄(text): each member's log-probability of the whole text (its rolling
        windows summed), mixed over the members as in ``loglikelihood``."""
        from bayesflow.posterior.continuations import mean_log_probability

        pieces, owners = [], []
        for row, request in enumerate(requests):
            (text,) = request.args
            windows = get_rolling_token_windows(
                token_list=self.tok_encode(text), prefix_token=self._prefix, max_seq_len=self._max_length,
                context_len=1)
            for context, predicted in map(make_disjoint_window, windows):
                pieces.append((np.asarray(context + predicted, dtype=np.int64), len(context)))
                owners.append(row)
        scores = self._scores(pieces)
        per_text = np.zeros((scores.log_probs.shape[0], len(requests)))
        for member in range(per_text.shape[0]):
            np.add.at(per_text[member], np.asarray(owners, dtype=np.int64), scores.log_probs[member])
        answers = [float(value) for value in mean_log_probability(per_text)]
        for request, answer in zip(requests, answers):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, answer)
        return answers

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        raise TaskError(
            "a generate_until task asks the model to write text; a bayesflow posterior scores "
            f"text (lm-eval output types {', '.join(SUPPORTED)}), it does not generate; drop "
            "the generation tasks from --tasks"
        )

    # ----------------------------------------------------------------- helpers

    def _piece(self, context: list[int], continuation: list[int]) -> tuple[np.ndarray, int]:
        """The window (at most ``max_length`` + 1 tokens, the context cut on the left) and
        the index of its first continuation token."""
        if len(continuation) > self._max_length:
            raise TaskError(
                f"a continuation of {len(continuation)} tokens is longer than the model's context "
                f"of {self._max_length} tokens; lm-eval cannot score it with this model"
            )
        window = (context + continuation)[-(self._max_length + 1):]
        return np.asarray(window, dtype=np.int64), len(window) - len(continuation)

    def __repr__(self) -> str:
        return f"PosteriorLM({self.posterior!r}, members={self.members.shape[0]}, max_length={self._max_length})"


def _tokenizer(posterior: FittedPosterior, model: Any, prefix: int | str | None) -> tuple[Any, int]:
    """The run's text encoder and the prefix token of an empty context (module docstring)."""
    from bayesflow.data.text import text_encoder
    from bayesflow.llm.source import check_folder
    from bayesflow.llm.tokenizer import load_folder_tokenizer

    spec = posterior.spec
    section = spec.model.model_dump(mode="json")
    kind = getattr(spec.data, "tokenizer", None) or ("model" if section.get("path") else "bytes")
    encode, _ = text_encoder(kind, section, posterior.base_dir)
    if prefix is not None:
        return encode, int(prefix)
    candidates: list[Any] = []
    if kind == "model":  # byte ids are bytes: a config's BOS id (1 by default) would be a control byte
        tokenizer = load_folder_tokenizer(check_folder(section["path"], posterior.base_dir))
        config = model.config
        candidates += [tokenizer.bos_token_id, tokenizer.eos_token_id,
                       getattr(config, "bos_token_id", None), getattr(config, "eos_token_id", None)]
    for candidate in candidates:
        if isinstance(candidate, list):  # a config may list several EOS ids
            candidate = candidate[0] if candidate else None
        if isinstance(candidate, int):
            return encode, candidate
    newline = encode("\n")
    if len(newline) == 1:
        return encode, int(newline[0])
    raise PosteriorError(
        "PosteriorLM: the model's tokenizer has no BOS or EOS token and a newline is not one "
        "token, so an empty context has no token to stand for it; pass prefix_token_id"
    )
