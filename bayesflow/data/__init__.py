"""Datasets a spec can name, as numpy arrays split into train and test (torch-free).

Every loader returns a :class:`Dataset`; its :attr:`Dataset.digest` is a hash of the
arrays, so a stage's cache key changes when the data do and not otherwise. The modules:

===================  ===========================================================================
``dataset``          :class:`Dataset`, the registry :data:`DATASETS`, paths and the split
``tabular``          ``sklearn_digits``, ``csv`` and ``none``
``imdb``             IMDB movie reviews as padded token ids
``text``             documents as token windows for a causal language model
``multiple_choice``  questions with lettered choices as prompts for a causal language model
``python``           a user's own function that returns the arrays (runs the user's code)
``checks``           checks of loaded data against the likelihood (:func:`check_data`)
``reference``        reference class probabilities from a file (``evaluate.reference.file``)
===================  ===========================================================================

Only this module imports the loaders' modules (which registers them); they import
``dataset`` and ``checks``, never the package, so no import cycle runs through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesflow.data import imdb, multiple_choice, python, tabular, text
from bayesflow.data.checks import DataWarning, check_data
from bayesflow.data.dataset import DATASETS, Dataset, resolve_path
from bayesflow.data.tabular import (
    MAX_CLASSES,
    csv,
    csv_target_task,
    none,
    sklearn_digits,
    target_task,
)

__all__ = [
    "DATASETS",
    "MAX_CLASSES",
    "DataWarning",
    "Dataset",
    "check_data",
    "csv",
    "csv_target_task",
    "imdb",
    "multiple_choice",
    "load_dataset",
    "none",
    "python",
    "resolve_path",
    "sklearn_digits",
    "tabular",
    "target_task",
    "text",
]


def load_dataset(
    config: dict[str, Any], base_dir: Path | None = None, model: dict[str, Any] | None = None
) -> Dataset:
    """Load the dataset a spec's ``data`` section describes (``text`` also reads the
    ``model`` section: its folder's tokenizer)."""
    options = dict(config)
    entry = DATASETS.entry(options.pop("name"))
    accepts = entry.parameters()
    if "base_dir" in accepts:  # a loader of files or user code: relative to the spec's folder
        options["base_dir"] = base_dir
    if "model" in accepts:  # a loader that reads the model's tokenizer
        options["model"] = model
    return entry.builder(**options)
