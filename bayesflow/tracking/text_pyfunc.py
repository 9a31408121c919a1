"""The pyfunc model of a language model's fit: texts in, their posterior-predictive scores out.

    model = mlflow.pyfunc.load_model(f"runs:/{fit_run_id}/model")
    scores = model.predict(pd.DataFrame({"text": ["The bees swarmed in May."]}))
    scores = model.predict(frame, params={"n_samples": 10, "seed": 1})

One row per text: ``tokens``, ``nll``, ``nll_per_token``, ``perplexity`` and the mean
``uncertainty_total`` / ``_aleatoric`` / ``_epistemic`` per token
(:mod:`bayesflow.posterior.texts` says how texts are tokenised, windowed and scored).

The model holds the trainable part only: its artifacts are the fit's ``posterior.npz``
(the trainable tensors), the run's ``resolved.yaml``, ``cell.json`` and
``base_model.json``, never the frozen weights. Loading rebuilds the base model: a
config-built one from its config and ``seed``, a local folder (``model.path``) from that
folder, recorded by its absolute path (``package:`` folders stay ``package:``: they
resolve inside the installed bayesflow), which must exist where the model is loaded.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from mlflow.pyfunc.model import PythonModel

from bayesflow.posterior import (
    CELL_FILE,
    MODEL_PATH,
    SPEC_FILE,
    FittedPosterior,
    cell_of,
    read_spec,
)
from bayesflow.posterior.texts import SCORE_COLUMNS, TEXT_COLUMN, score_texts
from bayesflow.tracking.pyfunc import model_files, store_model

__all__ = ["TextPosteriorModel", "log_text_model", "portable_spec"]


class TextPosteriorModel(PythonModel):  # type: ignore[misc]  # mlflow is untyped
    """The posterior predictive of one language-model fit, scoring texts.

    ``predict`` takes a DataFrame with a ``text`` column and the optional params
    ``n_samples`` (0: the spec's ``evaluate.n_samples``) and ``seed`` (−1: the evaluate
    stage's draw), and returns one row of :data:`~bayesflow.posterior.texts.SCORE_COLUMNS`
    per text.
    """

    def load_context(self, context: Any) -> None:
        artifacts = context.artifacts
        self.posterior = FittedPosterior.from_files(artifacts["posterior"], artifacts["spec"], artifacts["cell"])

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        options = params or {}
        seed = options.get("seed")
        scores = score_texts(
            self.posterior, model_input, n_samples=options.get("n_samples") or None,
            seed=None if seed is None or seed < 0 else int(seed),
        )
        return pd.DataFrame(scores, columns=list(SCORE_COLUMNS))


TEXT_MODEL_CODE = """\
\"\"\"The pyfunc model of one bayesflow language-model fit (bayesflow.tracking.text_pyfunc).\"\"\"
import mlflow

from bayesflow.tracking.text_pyfunc import TextPosteriorModel

mlflow.models.set_model(TextPosteriorModel())
"""


def portable_spec(text: str, base_dir: Path | None) -> str:
    """The resolved spec with a relative ``model.path`` made absolute (from ``base_dir``,
    default the working directory), so that the model loads from any folder."""
    from bayesflow.llm.family import absolute_path

    mapping = yaml.safe_load(text)
    path = mapping.get("model", {}).get("path")
    if isinstance(path, str) and absolute_path(path, base_dir) != path:
        mapping["model"]["path"] = absolute_path(path, base_dir)
        return yaml.safe_dump(mapping, sort_keys=False)
    return text


def log_text_model(
    run_id: str,
    posterior_npz: str | Path,
    spec_yaml: str,
    cell: dict[str, Any],
    tracking_uri: str,
    *,
    base_dir: Path | None = None,
) -> str | None:
    """Log a language-model fit's posterior as the pyfunc model ``model`` of its run.

    Args:
        run_id: the fit (child) run.
        posterior_npz: the fit's ``posterior.npz`` (the trainable tensors).
        spec_yaml: the run's resolved spec, as YAML text.
        cell: the fit's params (``method``, ``engine``, ``temperature``, ``seed``) and,
            from the process that loaded the data, its sizes (``num_classes``: the
            vocabulary); without them the vocabulary is read from the tokenizer here, which
            for ``tokenizer: model`` imports transformers and torch (about 190 MiB).
        tracking_uri: the MLflow store; ``memory://`` logs nothing.
        base_dir: the folder a relative ``model.path`` is taken from (default cwd).

    Returns:
        The model's URI (``runs:/<run id>/model``), or None for an in-memory store or a fit
        on multiple-choice questions.
    """
    from bayesflow.llm.family import REFERENCE, base_model_text

    if tracking_uri.startswith("memory:"):
        return None
    text = portable_spec(spec_yaml, base_dir)
    spec = read_spec(text)
    if spec.data.INPUTS != "text_tokens":  # multiple-choice prompts: no model of texts (not built yet)
        return None
    vocabulary = cell.get("num_classes")
    if vocabulary is None:
        from bayesflow.data.text import encode_documents

        _, vocabulary = encode_documents([], spec.data, spec.model.model_dump(mode="json"), base_dir)
    sizes = {"num_features": spec.data.length, "num_classes": int(vocabulary), "input_dtype": np.dtype(np.int64).str}
    record = {**cell_of(cell), "run_id": run_id, **sizes}
    with model_files(run_id, tracking_uri) as files:
        (files / SPEC_FILE).write_text(text)
        (files / CELL_FILE).write_text(json.dumps(record, indent=1))
        (files / REFERENCE).write_text(base_model_text(spec.model, spec.data.scored))
        sources = {"posterior": Path(posterior_npz), "spec": files / SPEC_FILE,
                   "cell": files / CELL_FILE, "base_model": files / REFERENCE}
        store_model(files, run_id, sources, TEXT_MODEL_CODE, _signature(), None, tracking_uri)
    return f"runs:/{run_id}/{MODEL_PATH}"


def _signature() -> Any:
    """A ``text`` string column in; the score columns out (``tokens`` an integer); the
    params ``n_samples`` (0) and ``seed`` (−1)."""
    from mlflow.models import infer_signature

    inputs = pd.DataFrame({TEXT_COLUMN: ["a text"]})
    outputs = pd.DataFrame({name: np.zeros(1, dtype=np.int64 if name == "tokens" else np.float64)
                            for name in SCORE_COLUMNS})
    with warnings.catch_warnings():  # `tokens` counts tokens: an integer, never missing
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer column")
        return infer_signature(inputs, outputs, params={"n_samples": 0, "seed": -1})
