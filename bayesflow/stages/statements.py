"""The evaluate stage's statements part (``evaluate.statements``): a language model's
posterior completes the last word of in-distribution and out-of-distribution statements.

The statements travel with the data (:mod:`bayesflow.data.statements`) and are tokenised
as the training windows are (``data.tokenizer``: bytes or the model folder's tokenizer,
through :func:`bayesflow.data.text.encode_documents`); the scores are
:mod:`bayesflow.llm.statement_scores`. Logged: ``statements_nll_in`` / ``_ood`` (mean
last-word NLL under the predictive), ``statements_tu_*``, ``statements_au_*`` and
``statements_eu_*`` (mean uncertainties, nats, summed over each word's tokens), and
``statements_auroc_tu`` / ``statements_auroc_eu`` (OOD = 1), and the same AUROCs of the
scores per token of the word (``statements_auroc_tu_per_token``, ``_eu_per_token``). With
several named OOD sets (``ood: {cipher: cipher, esperanto: <file>}``) each set's name takes
the place of ``ood`` and its AUROCs end in ``_<name>`` (``statements_auroc_eu_esperanto``).
Saved in ``evaluation.npz`` per statement: ``statements_{nll,tu,au,eu,tokens}_{in,<set>}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bayesflow.dag.plan import Stage
from bayesflow.stages.context import WorkflowContext

__all__ = ["STATEMENTS_SEED_OFFSET", "statement_evaluation"]

# Offset of the members' draw from the stage's seed: not the predictive's draw (10,000),
# the KSD's (30,000) or the validation rows' (40,000) of bayesflow.stages.evaluate.
STATEMENTS_SEED_OFFSET = 50_000

CONVENTIONS = {
    "statements_nll": "per statement, nats: -log of the mean over posterior members of "
    "p(last word | everything before it), teacher-forced over the word's tokens",
    "statements_uncertainty": "per statement, nats: TU, AU and EU of uncertainty_total / "
    "_aleatoric / _epistemic at each of the last word's token positions (the next-token "
    "distributions over the vocabulary, teacher-forced along the true word), summed over them",
    "statements_auroc": "AUROC of TU (statements_auroc_tu) or EU (statements_auroc_eu) as a "
    "score, in-distribution statements label 0, out-of-distribution label 1; Mann-Whitney "
    "with average ranks for ties (0.5 = chance; one member has EU = 0: exactly 0.5)",
    "statements_auroc_per_token": "as statements_auroc with TU or EU divided by the number of "
    "the word's tokens (statements_auroc_tu_per_token, statements_auroc_eu_per_token)",
}


def statement_evaluation(
    context: WorkflowContext, stage: Stage, problem: Any, posterior: Any
) -> tuple[dict[str, float], dict[str, str], dict[str, np.ndarray]]:
    """The statements' metrics, convention lines and per-statement arrays of one fit."""
    from bayesflow.data.statements import statement_encoder
    from bayesflow.evaluate import draw_samples
    from bayesflow.llm.statement_scores import score_statements, statement_metrics
    from bayesflow.llm.statements import encode_statements

    settings = context.spec.evaluate.statements
    assert settings is not None and context.dataset.statements is not None
    count = settings.n_samples or context.spec.evaluate.n_samples
    generator = context.generator(problem.device, STATEMENTS_SEED_OFFSET + int(stage.seed or 0))
    members = draw_samples(posterior, count, generator)
    texts = [text for group in context.dataset.statements for text in group]
    encoder = statement_encoder(context.spec, context.loaded.base_dir, texts)
    scores = [
        score_statements(problem, members, encode_statements(texts, encoder), settings.batch_size)
        for texts in context.dataset.statements
    ]
    names = [name for name, _ in settings.ood_sets()]
    metrics: dict[str, float] = {}
    for name, outside in zip(names, scores[1:]):
        metrics.update(statement_metrics(scores[0], outside, name))
    arrays = {
        f"statements_{kind}_{suffix}": getattr(scored, field)
        for suffix, scored in zip(("in", *names), scores)
        for kind, field in (("nll", "nll"), ("tu", "total"), ("au", "aleatoric"), ("eu", "epistemic"),
                            ("tokens", "tokens"))
    }
    notes = dict(CONVENTIONS)
    notes["statements_members"] = f"{members.shape[0]} posterior member(s) per statement"
    return metrics, notes, arrays

