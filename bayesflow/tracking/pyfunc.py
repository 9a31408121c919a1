"""A fitted posterior as an MLflow pyfunc model, logged under its fit run.

    model = mlflow.pyfunc.load_model(f"runs:/{fit_run_id}/model")
    probabilities = model.predict(features)                  # a DataFrame, one column per class
    probabilities = model.predict(features, params={"n_samples": 100, "seed": 1})

The model's artifacts are the three files :func:`bayesflow.load_posterior` reads
(``posterior.npz``, ``resolved.yaml``, ``cell.json``), so a downloaded ``model`` folder
is also a valid ``load_posterior`` source. Like
:mod:`~bayesflow.tracking.mlflow_tracker`, this module imports mlflow; nothing else in
bayesflow does (``import mlflow.pyfunc`` takes about 2 s, so callers import this module
only when they log or load a model).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
import mlflow.pyfunc
import numpy as np
import pandas as pd
import yaml
from mlflow.exceptions import MlflowException
from mlflow.pyfunc.model import PythonModel

from bayesflow.errors import TrackingError
from bayesflow.posterior import (
    CELL_FILE,
    MODEL_PATH,
    SPEC_FILE,
    FittedPosterior,
    cell_of,
    cell_sizes,
    read_spec,
)

if TYPE_CHECKING:
    from bayesflow.spec import WorkflowSpec

__all__ = [
    "MODEL_PATH",
    "PosteriorModel",
    "log_posterior_model",
    "model_files",
    "output_columns",
    "prediction_frame",
    "store_model",
]

# Rows of the input example the signature is inferred from.
EXAMPLE_ROWS = 2


class PosteriorModel(PythonModel):  # type: ignore[misc]  # mlflow is untyped
    """The posterior predictive of one fit as a pyfunc model.

    ``predict`` takes features (a DataFrame or an array of shape (n, features)) and the
    optional params ``n_samples`` and ``seed`` (see :meth:`FittedPosterior.predict`), and
    returns a DataFrame: ``class_0 … class_{C-1}`` probabilities for classification,
    ``mean`` and ``sd`` (the predictive standard deviation) for Gaussian regression.
    """

    def load_context(self, context: Any) -> None:
        artifacts = context.artifacts
        self.posterior = FittedPosterior.from_files(
            artifacts["posterior"], artifacts["spec"], artifacts["cell"]
        )

    # MLflow 3 reads predict's input type hint: a DataFrame is one it accepts without
    # inferring a schema from it (the logged signature is the schema) or warning.
    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        options = params or {}
        seed = options.get("seed")
        prediction = self.posterior.predict(
            model_input, n_samples=options.get("n_samples") or None,
            seed=None if seed is None or seed < 0 else int(seed),
        )
        return prediction_frame(prediction)


def prediction_frame(prediction: Any) -> pd.DataFrame:
    """A :meth:`FittedPosterior.predict` result as the pyfunc model's DataFrame."""
    if isinstance(prediction, tuple):
        mean, variance = prediction
        return pd.DataFrame({"mean": mean.numpy(), "sd": variance.sqrt().numpy()})
    values = prediction.numpy()
    return pd.DataFrame(values, columns=[f"class_{k}" for k in range(values.shape[1])])


# The model's code (MLflow's models-from-code: no pickled object in the model). Loading it
# imports bayesflow, which the environment that loads the model must have.
MODEL_CODE = """\
\"\"\"The pyfunc model of one bayesflow fit (bayesflow.tracking.pyfunc).\"\"\"
import mlflow

from bayesflow.tracking.pyfunc import PosteriorModel

mlflow.models.set_model(PosteriorModel())
"""


def log_posterior_model(
    run_id: str,
    posterior_npz: str | Path,
    spec_yaml: str | Path,
    cell: dict[str, Any],
    tracking_uri: str,
    *,
    base_dir: Path | None = None,
) -> str | None:
    """Log a fit's posterior as the pyfunc model ``model`` of its run (a run artifact).

    The model is saved with ``mlflow.pyfunc.save_model`` and copied into the run's
    artifacts, not logged with ``mlflow.pyfunc.log_model``: in MLflow 3.17 ``log_model``
    also creates a LoggedModel entity, copies every metric history of the run onto it and
    commits about 20 SQLite transactions (0.15-0.37 s per fit on the tests' tiny workflow,
    2-core machine; ``save_model`` 0.04-0.12 s). ``save_model`` runs once per signature
    in a process; later fits copy that folder and write their own artifacts and MLmodel
    fields (:func:`_from_template`), a few milliseconds. The first call of a process also
    imports ``mlflow.pyfunc`` and, without sizes in ``cell``, loads the data once.
    ``mlflow.pyfunc.load_model("runs:/<run id>/model")`` loads either.

    Args:
        run_id: the fit (child) run.
        posterior_npz: the fit's ``posterior.npz``.
        spec_yaml: the run's resolved spec, as YAML text or a file path.
        cell: the fit's params (``method``, ``engine``, ``temperature``, ``seed``; the
            rest is ignored); ``num_features``, ``num_classes`` and ``input_dtype`` when
            known, else the spec's data are loaded once per process to learn them.
        tracking_uri: the MLflow store; ``memory://`` (the in-memory tracker) logs nothing.
        base_dir: the folder the spec's relative data paths are taken from (default cwd).

    Returns:
        The model's URI (``runs:/<run id>/model``), or None when nothing was logged (an
        in-memory store, or an ``energy`` likelihood, which has no predictive). The
        flat family's pyfunc model; a language model's scores texts
        (:func:`bayesflow.tracking.text_pyfunc.log_text_model`; :mod:`bayesflow.families`).
    """
    if tracking_uri.startswith("memory:"):
        return None
    text = Path(spec_yaml).read_text() if _is_path(spec_yaml) else str(spec_yaml)
    spec = read_spec(text)
    if spec.likelihood.name == "energy":  # the output is a log density: nothing to predict
        return None
    record = {**cell_of(cell), "run_id": run_id}
    if record.get("num_features") is None:
        record.update(cell_sizes(spec, base_dir))
    with model_files(run_id, tracking_uri) as folder:
        _save_and_log(folder, run_id, posterior_npz, text, spec, record, tracking_uri)
    return f"runs:/{run_id}/{MODEL_PATH}"


@contextmanager
def model_files(run_id: str, tracking_uri: str) -> Iterator[Path]:
    """A temporary folder to write a fit's model in; a failure of MLflow or the disk there
    is a :class:`TrackingError` that says what to check."""
    try:
        with tempfile.TemporaryDirectory() as folder:
            yield Path(folder)
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"logging the pyfunc model of fit run {run_id} to {tracking_uri} failed: {exc}; "
            "check that the store is writable (the fit's posterior is logged regardless)"
        ) from exc


def _save_and_log(
    files: Path,
    run_id: str,
    posterior_npz: str | Path,
    text: str,
    spec: WorkflowSpec,
    cell: dict[str, Any],
    tracking_uri: str,
) -> None:
    """Save the model into ``files/model`` and copy it into the run's artifacts."""
    (files / SPEC_FILE).write_text(text)
    (files / CELL_FILE).write_text(json.dumps(cell, indent=1))
    example, signature = _signature(spec, cell)
    sources = {"posterior": Path(posterior_npz), "spec": files / SPEC_FILE, "cell": files / CELL_FILE}
    # An array: a frame example makes MLflow 3.17 warn under pandas 3 (Pandas4Warning).
    store_model(files, run_id, sources, MODEL_CODE, signature, example.to_numpy(), tracking_uri)


def store_model(
    files: Path,
    run_id: str,
    sources: dict[str, Path],
    code: str,
    signature: Any,
    example: np.ndarray | None,
    tracking_uri: str,
) -> None:
    """Save a models-from-code pyfunc model with the artifact files ``sources`` into
    ``files/model`` (from a template after the first of its kind) and copy it into the
    run's artifacts."""
    (files / "model_code.py").write_text(code)
    shape = None if example is None else [str(example.dtype), list(example.shape)]
    key = json.dumps(
        [signature.to_dict(), code, shape, {name: path.name for name, path in sources.items()}],
        sort_keys=True,
    )
    template = _TEMPLATES.get(key)
    if template is None:
        with _quiet("mlflow.pyfunc"), warnings.catch_warnings():  # one INFO line per fit: "Validating input example"
            # a text model's signature says its input (a text column): no example to validate
            warnings.filterwarnings("ignore", message="An input example was not provided")
            mlflow.pyfunc.save_model(
                files / MODEL_PATH,
                python_model=str(files / "model_code.py"),
                artifacts={name: str(path) for name, path in sources.items()},
                signature=signature,
                input_example=example,
                pip_requirements=list(_requirements()),
            )
        _keep_template(key, files / MODEL_PATH)
    else:
        _from_template(template, files / MODEL_PATH, sources, files / "model_code.py")
    mlflow.MlflowClient(tracking_uri).log_artifacts(run_id, str(files / MODEL_PATH), MODEL_PATH)


# Saved models by signature, artifact names and requirements: ``mlflow.pyfunc.save_model``
# validates the input example by loading the model and predicting (most of its 40-120 ms
# per fit); every later fit of the process with the same signature copies the saved
# folder and changes only what differs (the three artifacts and the MLmodel's uuid, time,
# sources and size). The folders live until the process ends (a killed process's are
# swept by the next process that keeps templates: :mod:`bayesflow.tracking.scratch`).
TEMPLATE_PREFIX = "bayesflow-pyfunc-"
_TEMPLATES: dict[str, Path] = {}
_TEMPLATE_ROOT: list[tempfile.TemporaryDirectory[str]] = []


def _keep_template(key: str, model: Path) -> None:
    """Keep a copy of a freshly saved ``model`` folder as the template of ``key``."""
    from bayesflow.tracking.scratch import process_folder

    if not _TEMPLATE_ROOT:
        _TEMPLATE_ROOT.append(process_folder(TEMPLATE_PREFIX))  # sweeps what killed processes left
    target = Path(tempfile.mkdtemp(dir=_TEMPLATE_ROOT[0].name)) / MODEL_PATH
    shutil.copytree(model, target)
    _TEMPLATES[key] = target


def _from_template(template: Path, model: Path, sources: dict[str, Path], code: Path) -> None:
    """Write the model of one fit as files: the template's folder with this fit's
    artifacts, and its MLmodel with a new uuid and creation time, this fit's source paths
    and its size (what ``save_model`` would have written for the same signature). The
    MLmodel is YAML, read and written as ``mlflow.models.Model`` does (``safe_dump``,
    block style), with libyaml where PyYAML has it."""
    import copy
    from datetime import datetime, timezone

    shutil.copytree(template, model)
    if template not in _DESCRIPTIONS:
        _DESCRIPTIONS[template] = yaml.load((template / "MLmodel").read_text(), Loader=_YAML_LOADER)
    description = copy.deepcopy(_DESCRIPTIONS[template])
    flavor = description["flavors"]["python_function"]
    for name, source in sources.items():
        entry = flavor["artifacts"][name]
        shutil.copyfile(source, model / entry["path"])
        entry["uri"] = str(source)
    flavor["model_code_path"] = str(code)
    description["model_uuid"] = uuid.uuid4().hex
    description["utc_time_created"] = str(datetime.now(timezone.utc).replace(tzinfo=None))
    description["model_size_bytes"] = sum(
        path.stat().st_size for path in model.rglob("*") if path.is_file() and path.name != "MLmodel"
    )
    (model / "MLmodel").write_text(yaml.dump(description, Dumper=_YAML_DUMPER, default_flow_style=False))


# The parsed MLmodel of each template folder.
_DESCRIPTIONS: dict[Path, dict[str, Any]] = {}
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _signature(spec: WorkflowSpec, cell: dict[str, Any]) -> tuple[pd.DataFrame, Any]:
    """An input example and the signature inferred from it: EXAMPLE_ROWS rows of the data's
    width, the output frame of that shape (:func:`output_columns`), and the params
    ``n_samples`` (0: the spec's ``evaluate.n_samples``) and ``seed`` (-1: the evaluate
    stage's).

    The input columns are left unnamed and widened to float64 (int64 for token ids): MLflow
    then takes features by position from a DataFrame with any column names or an array,
    and casts float32, float64 and integer inputs alike (an array schema would refuse any
    dtype but its own, a pandas frame's float64 included). Neither torch nor the
    likelihood is built: this runs in the tracking worker, which imports neither.
    """
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import ColSpec, Schema

    integer = np.dtype(cell.get("input_dtype") or "float32").kind in "iu"
    width = int(cell["num_features"])
    dtype = np.int64 if integer else np.float64
    example = pd.DataFrame(np.zeros((EXAMPLE_ROWS, width), dtype=dtype))
    output = pd.DataFrame({name: np.zeros(EXAMPLE_ROWS) for name in output_columns(spec, cell.get("num_classes"))})
    with warnings.catch_warnings():  # token ids are integers and are never missing
        warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
        inferred = infer_signature(example, output, params={"n_samples": 0, "seed": -1})
    inputs = Schema([ColSpec(column.type) for column in inferred.inputs.inputs])
    return example, ModelSignature(inputs=inputs, outputs=inferred.outputs, params=inferred.params)


def output_columns(spec: WorkflowSpec, num_classes: int | None) -> list[str]:
    """The columns of the pyfunc model's output (:func:`prediction_frame`), all float64:
    ``class_0 … class_{C-1}`` for a classification likelihood (C = 2 for ``bernoulli``,
    whose one logit gives p(y = 0) and p(y = 1)), ``mean`` and ``sd`` for a regression.
    Read off the spec, not computed with the likelihood (torch): the tracking worker calls
    it (tests/tracking/test_worker_imports.py checks both against the likelihoods)."""
    if spec.likelihood.TASK != "classification":
        return ["mean", "sd"]
    classes = 2 if spec.likelihood.name == "bernoulli" else int(num_classes or 0)
    return [f"class_{k}" for k in range(classes)]


@functools.lru_cache(maxsize=1)
def _requirements() -> tuple[str, ...]:
    """This environment's bayesflow, torch and mlflow, pinned: the model is loaded where it
    was logged (bayesflow is imported, not copied into the model). A package run from a
    source folder that pip never installed (``PYTHONPATH=checkout``) has no version to pin
    and is named unpinned."""
    from importlib import metadata

    def requirement(name: str) -> str:
        try:
            return f"{name}=={metadata.version(name)}"
        except metadata.PackageNotFoundError:
            return name

    return tuple(
        requirement(name) for name in ("bayesflow-workflows", "torch", "mlflow", "numpy", "pandas")
    )


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """The logger ``name`` at WARNING for a block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _is_path(value: str | Path) -> bool:
    return isinstance(value, Path) or ("\n" not in value and Path(value).is_file())
