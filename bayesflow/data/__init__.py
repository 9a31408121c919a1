"""Datasets a spec can name, as numpy arrays split into train and test (torch-free).

Every loader returns a :class:`Dataset`; its :attr:`Dataset.digest` is a hash of the
arrays, so a stage's cache key changes when the data do and not otherwise.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.errors import SpecError
from bayesflow.registry import Registry

__all__ = ["Dataset", "DATASETS", "load_dataset"]

DATASETS: Registry[Any] = Registry("dataset")


@dataclass(frozen=True)
class Dataset:
    """Train and test arrays; ``task`` is ``"classification"`` or ``"regression"``."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str
    num_classes: int | None = None

    @property
    def num_features(self) -> int:
        """Number of input features."""
        return int(self.x_train.shape[1])

    @property
    def digest(self) -> str:
        """SHA-256 over the four arrays' bytes, shapes and dtypes."""
        digest = hashlib.sha256()
        for array in (self.x_train, self.y_train, self.x_test, self.y_test):
            digest.update(str((array.shape, array.dtype.str)).encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


def _split(
    x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int, stratify: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y if stratify else None
    )
    return x_train, y_train, x_test, y_test


@DATASETS.register("sklearn_digits")
def sklearn_digits(
    test_fraction: float = 0.5, split_seed: int = 0, standardize: bool = True
) -> Dataset:
    """scikit-learn's 8×8 handwritten digits: 1,797 images, 64 features, 10 classes."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.data.astype(np.float32)
    if standardize:
        x = x / 16.0  # pixel intensities are integers 0..16
    y = bunch.target.astype(np.int64)
    x_train, y_train, x_test, y_test = _split(x, y, test_fraction, split_seed, stratify=True)
    return Dataset(x_train, y_train, x_test, y_test, "classification", num_classes=10)


def resolve_path(path: str, base_dir: Path | None = None) -> Path:
    """Resolve a spec's data path: ``package:NAME`` or relative to the spec's folder."""
    if path.startswith("package:"):
        name = path.split(":", 1)[1]
        resolved = Path(str(resources.files("bayesflow.data") / "files" / name))
    else:
        resolved = Path(path).expanduser()
        if not resolved.is_absolute() and base_dir is not None:
            candidate = base_dir / resolved
            resolved = candidate if candidate.exists() or not resolved.exists() else resolved
    return resolved


@DATASETS.register("csv")
def csv(
    path: str,
    target: str,
    test_fraction: float = 0.25,
    split_seed: int = 0,
    standardize: bool = True,
    base_dir: Path | None = None,
) -> Dataset:
    """A CSV file with a header row: numeric features and one target column."""
    import pandas as pd

    file = resolve_path(path, base_dir)
    if not file.exists():
        raise SpecError(f"data.path: file {str(file)!r} does not exist; fix the path")
    frame = pd.read_csv(file)
    if target not in frame.columns:
        raise SpecError(
            f"data.target: column {target!r} is not in {file.name} "
            f"(columns: {', '.join(map(str, frame.columns))})"
        )
    y_raw = frame[target].to_numpy()
    features = frame.drop(columns=[target])
    non_numeric = [c for c in features.columns if not np.issubdtype(features[c].dtype, np.number)]
    if non_numeric:
        raise SpecError(f"data: columns {non_numeric} of {file.name} are not numeric")
    x = features.to_numpy(dtype=np.float32)
    integer_target = np.issubdtype(y_raw.dtype, np.integer) and len(np.unique(y_raw)) <= 50
    if integer_target:
        y = y_raw.astype(np.int64)
        task, classes = "classification", int(y.max()) + 1
    else:
        y = y_raw.astype(np.float32)
        task, classes = "regression", None
    x_train, y_train, x_test, y_test = _split(x, y, test_fraction, split_seed, integer_target)
    if standardize:
        mean, sd = x_train.mean(0), x_train.std(0) + 1e-8
        x_train, x_test = (x_train - mean) / sd, (x_test - mean) / sd
    return Dataset(
        x_train.astype(np.float32), y_train, x_test.astype(np.float32), y_test, task, classes
    )


def load_dataset(config: dict[str, Any], base_dir: Path | None = None) -> Dataset:
    """Load the dataset a spec's ``data`` section describes."""
    options = dict(config)
    name = options.pop("name")
    builder = DATASETS.get(name)
    if name == "csv":
        options["base_dir"] = base_dir
    return builder(**options)
