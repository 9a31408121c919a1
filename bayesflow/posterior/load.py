"""``load_posterior``: a fitted posterior from a fit run id or from local files."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bayesflow.errors import TrackingError
from bayesflow.posterior.files import (
    CELL_FILE,
    MODEL_PATH,
    POSTERIOR_FILE,
    SIZE_KEYS,
    SPEC_FILE,
    PosteriorError,
    cell_of,
)
from bayesflow.posterior.fitted import FittedPosterior

__all__ = ["load_posterior"]

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
# A language model's fit logs it beside posterior.npz (bayesflow.llm.family.REFERENCE): the
# model section with a folder's absolute path.
BASE_MODEL_FILE = "base_model.json"


def load_posterior(
    source: str | Path, *, tracking_uri: str | None = None, device: str = "cpu"
) -> FittedPosterior:
    """Load a fitted posterior: from a fit run of a ``bayesflow run``, or from files.

    Args:
        source: a fit (child) run id; or a local folder holding ``posterior.npz`` (or
            ``posterior/posterior.npz``), the resolved spec (``resolved.yaml``,
            ``spec.yaml`` or ``spec/resolved.yaml``) and optionally ``cell.json`` (a
            downloaded pyfunc ``model`` folder has all three under ``artifacts/``); or the
            path of a ``posterior.npz`` with those files beside it.
        tracking_uri: the MLflow store of a run id (default ``$MLFLOW_TRACKING_URI``,
            else ``sqlite:///mlflow.db`` in the working directory).
        device: where the network's parameters live.

    Without recorded sizes (a folder without ``cell.json``, a run without its pyfunc
    model) the spec's dataset is loaded to learn the network's input and output sizes.

    Raises:
        PosteriorError: an unknown run or path, a parent run, a failed fit, a run
            without a posterior; the message says what to pass instead.
    """
    path = Path(source)
    if path.exists():
        return _from_path(path, device)
    text = str(source)
    if not _RUN_ID.match(text):
        raise PosteriorError(
            f"load_posterior: {text!r} is neither an existing file or folder nor an MLflow "
            "run id (32 hex digits); pass a fit run id from bayesflow.results(<parent run "
            "id>)['run_id'], or the folder of a downloaded posterior"
        )
    return _from_run(text, tracking_uri, device)


def _first(folder: Path, names: tuple[str, ...]) -> Path | None:
    return next((folder / name for name in names if (folder / name).is_file()), None)


def _from_path(path: Path, device: str) -> FittedPosterior:
    """A posterior from local files (no MLflow)."""
    if path.is_dir():
        folder = path / "artifacts" if (path / "artifacts" / POSTERIOR_FILE).is_file() else path
        posterior = _first(folder, (POSTERIOR_FILE, f"posterior/{POSTERIOR_FILE}"))
    else:
        folder, posterior = path.parent, path
    spec = _first(folder, (SPEC_FILE, "spec.yaml", f"spec/{SPEC_FILE}"))
    if posterior is None or spec is None:
        found = ((POSTERIOR_FILE, posterior), (SPEC_FILE, spec))
        missing = [name for name, file in found if file is None]
        if (folder / BASE_MODEL_FILE).is_file():  # bayesflow.llm.product's files
            raise PosteriorError(
                f"load_posterior: {path} is a language model's posterior (base_model.json, no "
                f"{SPEC_FILE}); load it with bayesflow.llm.product.load_lm_posterior({str(folder)!r}), "
                "or pass the fit run id"
            )
        raise PosteriorError(
            f"load_posterior: {path} lacks {' and '.join(missing)}; pass a folder holding a "
            f"fit's {POSTERIOR_FILE} and its run's spec/{SPEC_FILE} (plus {CELL_FILE} for the "
            "cell's method and seed), or a fit run id"
        )
    cell = _first(folder, (CELL_FILE,))
    return FittedPosterior.from_files(posterior, spec, cell, base_dir=folder, device=device)


def _tracker(tracking_uri: str | None) -> Any:
    """The store's tracker (:func:`bayesflow.tracking.read.open_tracker`), its missing-store
    error as a PosteriorError."""
    from bayesflow.tracking.read import open_tracker

    try:
        return open_tracker(tracking_uri)
    except TrackingError as error:
        raise PosteriorError(f"load_posterior: {error}") from None


def _from_run(run_id: str, tracking_uri: str | None, device: str) -> FittedPosterior:
    """A posterior from a fit run: its npz, its parent's resolved spec, its params."""
    tracker = _tracker(tracking_uri)
    record = _fit_record(tracker, run_id)
    cell = cell_of(record.params)
    cell["run_id"] = run_id
    if "noise_sd_chosen" in record.metrics:  # `noise_sd: auto`: the noise the fit chose
        cell["noise_sd_chosen"] = float(record.metrics["noise_sd_chosen"])
    with tempfile.TemporaryDirectory() as folder:
        try:
            posterior = tracker.download_artifact(run_id, f"posterior/{POSTERIOR_FILE}", folder)
        except TrackingError as exc:
            raise PosteriorError(
                f"fit run {run_id} has no posterior/{POSTERIOR_FILE} (a method without a "
                "posterior, or a run logged by an older bayesflow); pick another fit from "
                "bayesflow.results(<parent run id>)"
            ) from exc
        try:
            spec = tracker.download_artifact(record.parent_id or "", f"spec/{SPEC_FILE}", folder)
        except TrackingError as exc:
            raise PosteriorError(
                f"the parent run {record.parent_id} of fit run {run_id} has no "
                f"spec/{SPEC_FILE}; download the fit's posterior and pass a folder with "
                "the spec beside it"
            ) from exc
        spec = _with_recorded_model_path(tracker, run_id, Path(spec), Path(folder))
        cell.update(_recorded_sizes(tracker, record, folder))
        return FittedPosterior.from_files(posterior, spec, cell, base_dir=Path.cwd(), device=device)


def _with_recorded_model_path(tracker: Any, run_id: str, spec: Path, folder: Path) -> Path:
    """The run's spec with ``model.path`` the absolute path its fit recorded.

    A spec's relative ``model.path`` is taken from the spec's folder at run time; the
    parent's ``spec/resolved.yaml`` keeps it relative, while the fit's
    ``posterior/base_model.json`` records the folder's absolute path (docs/llm.md), which
    loads from any working directory. A fit without that file (a flat model) keeps its spec.
    """
    try:
        reference = tracker.download_artifact(run_id, f"posterior/{BASE_MODEL_FILE}", str(folder / "reference"))
    except TrackingError:
        return spec
    recorded = json.loads(Path(reference).read_text()).get("model", {}).get("path")
    mapping = yaml.safe_load(spec.read_text())
    model = mapping.get("model") if isinstance(mapping, dict) else None
    if not isinstance(recorded, str) or not isinstance(model, dict) or model.get("path") in (None, recorded):
        return spec
    model["path"] = recorded
    portable = folder / "portable" / SPEC_FILE
    portable.parent.mkdir()
    portable.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return portable


def _fit_record(tracker: Any, run_id: str) -> Any:
    """The run's record, checked to be a finished fit."""
    try:
        record = tracker.get_run(run_id)
    except TrackingError as exc:
        raise PosteriorError(
            f"load_posterior: no run {run_id} in {tracker.uri}; pass tracking_uri= of the "
            "store the run was logged to, or a fit run id from bayesflow.results(...)"
        ) from exc
    role = record.tags.get("bayesflow.role")
    if role == "parent":
        fits = tracker.search_runs(
            record.experiment, parent_id=run_id, tags={"bayesflow.role": "fit"}
        )
        listed = "\n".join(
            f"  {fit.run_id}  {fit.params.get('method')} T={fit.params.get('temperature')} "
            f"seed={fit.params.get('seed')}" for fit in fits[:20]
        )
        raise PosteriorError(
            f"run {run_id} is the parent run of a `bayesflow run`, not a fit; pass one of "
            f"its fit runs:\n{listed or '  (none)'}"
        )
    if role != "fit":
        raise PosteriorError(
            f"run {run_id} is not a bayesflow fit run (no bayesflow.role=fit tag); pass the "
            "id of a fit run, from bayesflow.results(<parent run id>)['run_id']"
        )
    if record.status != "FINISHED":
        error = record.tags.get("bayesflow.error", "no error recorded")
        raise PosteriorError(
            f"fit run {run_id} ({record.params.get('method')}) is {record.status}, not "
            f"FINISHED: {error}; it saved no posterior. Pick a finished fit from "
            "bayesflow.results(<parent run id>), or rerun the workflow"
        )
    return record


def _recorded_sizes(tracker: Any, record: Any, folder: str) -> dict[str, Any]:
    """The network's sizes from the run's params, else from its pyfunc model's cell.json
    ({} when the run has neither)."""
    if "num_features" in record.params:
        cell = cell_of(record.params)
    else:
        try:
            path = f"{MODEL_PATH}/artifacts/{CELL_FILE}"
            local = tracker.download_artifact(record.run_id, path, folder)
        except TrackingError:
            return {}
        cell = json.loads(Path(local).read_text())
    return {key: cell[key] for key in SIZE_KEYS if key in cell}
