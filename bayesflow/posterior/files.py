"""The files a fitted posterior is rebuilt from, and the cell that names it.

``posterior.npz`` (docs/design.md, "Contracts"), the run's resolved spec (``resolved.yaml``,
logged to the parent run as ``spec/resolved.yaml``) and ``cell.json``: the fit's sweep
coordinates and the sizes its network needs, so that loading does not read the data.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.errors import BayesflowError
from bayesflow.families import data_model_section

if TYPE_CHECKING:
    from bayesflow.spec import WorkflowSpec

__all__ = [
    "CELL_FILE",
    "CELL_KEYS",
    "MODEL_PATH",
    "POSTERIOR_FILE",
    "SIZE_KEYS",
    "SPEC_FILE",
    "PosteriorError",
    "cell_of",
    "cell_sizes",
    "dataset_sizes",
    "read_spec",
]

POSTERIOR_FILE = "posterior.npz"
SPEC_FILE = "resolved.yaml"
CELL_FILE = "cell.json"
# The artifact path of a fit's pyfunc model (bayesflow.tracking.pyfunc); its files are under
# ``model/artifacts/``.
MODEL_PATH = "model"
SIZE_KEYS = ("num_features", "num_classes", "input_dtype")
# What cell.json records: the sweep coordinates (docs/design.md, "Contracts") and the sizes.
CELL_KEYS = ("method", "engine", "temperature", "seed", *SIZE_KEYS)


class PosteriorError(BayesflowError):
    """A fitted posterior cannot be loaded or used as asked; the message says what to pass."""


def read_spec(text: str, where: str = "the resolved spec") -> WorkflowSpec:
    """Validate a run's resolved spec YAML (already checked when the run started: the data
    checks are not repeated, so the data need not be at hand)."""
    import yaml
    from pydantic import ValidationError

    from bayesflow.spec import WorkflowSpec

    # libyaml's loader where installed: the pure-Python one took 60 ms on a resolved spec.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return WorkflowSpec.model_validate(yaml.load(text, Loader=loader))  # a safe loader
    except (ValidationError, yaml.YAMLError) as exc:
        raise PosteriorError(
            f"{where} is not a valid bayesflow spec ({exc}); pass the `spec/resolved.yaml` "
            "the run logged, from the bayesflow version that ran it"
        ) from exc


@functools.lru_cache(maxsize=8)
def _sizes(data: str, base_dir: str, model: str = "null") -> tuple[int, int | None, str]:
    from bayesflow.data import load_dataset

    sizes = dataset_sizes(load_dataset(json.loads(data), Path(base_dir), json.loads(model)))
    return sizes["num_features"], sizes["num_classes"], sizes["input_dtype"]


def dataset_sizes(dataset: Any) -> dict[str, Any]:
    """:data:`SIZE_KEYS` of a loaded :class:`~bayesflow.data.Dataset`: what a fit's network
    is built with (a language model's: the window length, the vocabulary, int64 token ids).
    The process that loaded the data hands them to the tracking worker, so that logging a
    fit's model neither loads the data nor a tokenizer again (docs/design.md, "Tracking as
    a sink")."""
    return {"num_features": int(dataset.num_features),
            "num_classes": None if dataset.num_classes is None else int(dataset.num_classes),
            "input_dtype": dataset.x_train.dtype.str}


def cell_of(params: dict[str, Any]) -> dict[str, Any]:
    """A fit's cell (:data:`CELL_KEYS`) from its params, numbers parsed (MLflow keeps
    params as text)."""
    return {key: _param_value(params[key]) for key in CELL_KEYS if key in params}


def _param_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return None if value in ("None", "") else value


def cell_sizes(spec: WorkflowSpec, base_dir: Path | None = None) -> dict[str, Any]:
    """``num_features``, ``num_classes`` and ``input_dtype`` of the spec's data, by loading
    them (once per process and dataset)."""
    data = json.dumps(spec.data.model_dump(mode="json"), sort_keys=True)
    model = json.dumps(data_model_section(spec), sort_keys=True)
    features, classes, dtype = _sizes(data, str(base_dir or Path.cwd()), model)
    return {"num_features": features, "num_classes": classes, "input_dtype": dtype}
