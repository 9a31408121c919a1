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

__all__ = ["DATASETS", "Dataset", "csv_target_task", "load_dataset", "target_task"]

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
    x_ood: np.ndarray | None = None
    episode_train: np.ndarray | None = None
    episode_test: np.ndarray | None = None

    @property
    def num_features(self) -> int:
        """Number of input features."""
        return int(self.x_train.shape[1])

    @property
    def digest(self) -> str:
        """SHA-256 over the four arrays' bytes, shapes and dtypes."""
        digest = hashlib.sha256()
        arrays = [self.x_train, self.y_train, self.x_test, self.y_test]
        if self.x_ood is not None:
            arrays.append(self.x_ood)
        for array in arrays:
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
    test_fraction: float = 0.5,
    split_seed: int = 0,
    standardize: bool = True,
    holdout_classes: list[int] | None = None,
    episodes: int = 0,
    episode_kind: str = "permuted",
) -> Dataset:
    """scikit-learn's 8×8 handwritten digits: 1,797 images, 64 features, 10 classes.

    With ``holdout_classes`` those digits are removed from training and testing and
    become the out-of-distribution inputs (``x_ood``); the remaining classes are
    relabelled 0..C-1 in increasing order.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.data.astype(np.float32)
    if standardize:
        x = x / 16.0  # pixel intensities are integers 0..16
    y = bunch.target.astype(np.int64)
    x_ood = None
    held = sorted(set(holdout_classes or []))
    if held:
        outside = np.isin(y, held)
        x_ood, x, y = x[outside], x[~outside], y[~outside]
        kept = sorted(set(range(10)) - set(held))
        y = np.searchsorted(np.array(kept), y).astype(np.int64)
    x_train, y_train, x_test, y_test = _split(x, y, test_fraction, split_seed, stratify=True)
    episode_train = episode_test = None
    if episodes and episode_kind == "classes":
        # tasks of consecutive classes: 5 episodes are {0,1}, {2,3}, ..., {8,9}
        task = np.concatenate([
            np.full(len(group), index) for index, group in
            enumerate(np.array_split(np.arange(10 - len(held)), episodes))
        ])
        episode_train, episode_test = task[y_train], task[y_test]
    elif episodes:
        # permuted digits: episode k shows every image with the pixels in a fixed random
        # order of its own (episode 0 unpermuted), the same classes each time
        orders = [np.arange(x.shape[1])] + [
            np.random.default_rng(split_seed + k).permutation(x.shape[1]) for k in range(1, episodes)
        ]
        episode_train = np.repeat(np.arange(episodes), len(y_train))
        episode_test = np.repeat(np.arange(episodes), len(y_test))
        x_train = np.concatenate([x_train[:, order] for order in orders])
        x_test = np.concatenate([x_test[:, order] for order in orders])
        y_train, y_test = np.tile(y_train, episodes), np.tile(y_test, episodes)
    return Dataset(
        x_train, y_train, x_test, y_test, "classification", num_classes=10 - len(held), x_ood=x_ood,
        episode_train=episode_train, episode_test=episode_test,
    )


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


# An integer target column with at most this many distinct values is read as class labels.
MAX_CLASSES = 50


def target_task(values: np.ndarray) -> tuple[str, int | None]:
    """``("classification", C)`` for integer class labels 0..C-1, else ``("regression", None)``."""
    if np.issubdtype(values.dtype, np.integer) and len(np.unique(values)) <= MAX_CLASSES:
        return "classification", int(values.max()) + 1
    return "regression", None


def _read_csv(path: str, target: str, base_dir: Path | None, target_only: bool = False) -> Any:
    """Read a CSV file (only its target column with ``target_only``), checking both exist.

    Raises:
        SpecError: whose problem starts with the key at fault (``data.path: ...`` or
            ``data.target: ...``), so the spec loader can point at that key's line.
    """
    import pandas as pd

    file = resolve_path(path, base_dir)
    if not file.is_file():
        raise SpecError(f"data.path: file {str(file)!r} does not exist; fix the path")
    columns = list(pd.read_csv(file, nrows=0).columns)
    if target not in columns:
        raise SpecError(
            f"data.target: column {target!r} is not in {file.name} "
            f"(columns: {', '.join(map(str, columns))})"
        )
    return pd.read_csv(file, usecols=[target] if target_only else None)


def csv_target_task(path: str, target: str, base_dir: Path | None = None) -> tuple[str, int | None]:
    """The task a CSV file's target column implies (see :func:`target_task`), reading only it."""
    return target_task(_read_csv(path, target, base_dir, target_only=True)[target].to_numpy())


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
    frame = _read_csv(path, target, base_dir)
    file_name = resolve_path(path, base_dir).name
    y_raw = frame[target].to_numpy()
    features = frame.drop(columns=[target])
    non_numeric = [c for c in features.columns if not np.issubdtype(features[c].dtype, np.number)]
    if non_numeric:
        raise SpecError(f"data: columns {non_numeric} of {file_name} are not numeric")
    x = features.to_numpy(dtype=np.float32)
    task, classes = target_task(y_raw)
    integer_target = task == "classification"
    y = y_raw.astype(np.int64) if integer_target else y_raw.astype(np.float32)
    x_train, y_train, x_test, y_test = _split(x, y, test_fraction, split_seed, integer_target)
    if standardize:
        mean, sd = x_train.mean(0), x_train.std(0) + 1e-8
        x_train, x_test = (x_train - mean) / sd, (x_test - mean) / sd
    return Dataset(
        x_train.astype(np.float32), y_train, x_test.astype(np.float32), y_test, task, classes
    )


@DATASETS.register("none")
def none() -> Dataset:
    """No data: one pseudo-datum with one zero feature, in training and in testing.

    With N = 1 the per-datum log posterior is the full one, log p(y|x,θ) + log p(θ), so
    an ``energy`` likelihood over a model that outputs a log density samples that density.
    """
    inputs, targets = np.zeros((1, 1), dtype=np.float32), np.zeros(1, dtype=np.float32)
    return Dataset(inputs, targets, inputs.copy(), targets.copy(), "energy")


def load_dataset(config: dict[str, Any], base_dir: Path | None = None) -> Dataset:
    """Load the dataset a spec's ``data`` section describes."""
    options = dict(config)
    name = options.pop("name")
    builder = DATASETS.get(name)
    if name in ("csv", "imdb"):
        options["base_dir"] = base_dir
    return builder(**options)


# Registers "imdb"; imported last because the module uses DATASETS and Dataset above.
from bayesflow.data import imdb as imdb
