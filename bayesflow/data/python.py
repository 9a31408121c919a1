"""A user's own dataset: the one escape hatch from the dataset registry.

This runs your code. A spec such as::

    data:
      name: python
      module: data/load_mine.py     # a file, relative to the spec file (or a module name)
      function: load
      rows: 500                     # any further keys are passed to the function

makes bayesflow execute ``data/load_mine.py`` and call ``load(rows=500)``. The function
returns the arrays, as a tuple ``(x_train, y_train, x_test, y_test)`` with an optional
fifth ``x_ood`` (out-of-distribution inputs), or as a mapping with those keys, which may
add ``x_validation`` and ``y_validation``: rows held out of training to choose settings on
(the report's best temperature), so the test rows are only reported on. Inputs are
two-dimensional (rows × features) and numeric; targets are one-dimensional, integers
0..K−1 for a classification likelihood, real numbers for ``gaussian``. Inputs become
float32; integer targets int64, others float32.

The data's digest, part of every stage's cache key, covers the arrays returned and the
module's source, the function's name and the keys passed to it: editing the module
recomputes every stage, as changing a CSV file does. A module imported by name is
digested through its own file only, not through what it imports.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bayesflow.data.dataset import DATASETS, Dataset, resolve_path
from bayesflow.data.tabular import target_task
from bayesflow.errors import DataError, SpecError
from bayesflow.registry import closest
from bayesflow.user_code import run_user_code

__all__ = ["ARRAY_NAMES", "VALIDATION_NAMES", "python_data"]

ARRAY_NAMES = ("x_train", "y_train", "x_test", "y_test", "x_ood")
# Further keys a returned mapping may hold, both or neither: the validation rows.
VALIDATION_NAMES = ("x_validation", "y_validation")


def _import(module: str, base_dir: Path | None) -> tuple[Any, str]:
    """The user's module (executed) and its source text."""
    if module.endswith(".py") or "/" in module or "\\" in module:
        path = resolve_path(module, base_dir)
        if not path.is_file():
            raise SpecError(
                f"data.module: file {str(path)!r} does not exist; give the path of a .py file "
                "relative to the spec file, or an importable module name"
            )
        name = "bayesflow_user_data_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SpecError(f"data.module: {str(path)!r} cannot be imported as a Python module")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded  # dataclasses and pickling look their module up here
        loader = spec.loader
        try:
            run_user_code(lambda: loader.exec_module(loaded), "data.module", f"running {str(path)!r}", [path])
        except SpecError:
            sys.modules.pop(name, None)
            raise
        return loaded, path.read_text(errors="replace")
    importlib.invalidate_caches()
    added = str(Path.cwd()) not in sys.path
    if added:  # as `python -m` would: the working directory first
        sys.path.insert(0, str(Path.cwd()))
    try:
        loaded = run_user_code(
            lambda: importlib.import_module(module), "data.module", f"importing {module!r}",
            passthrough=(ModuleNotFoundError,),
        )
    except ModuleNotFoundError as exc:
        raise SpecError(
            f"data.module: cannot import {module!r} ({exc}); give the path of a .py file "
            f"(relative to the spec file) or a module importable from {Path.cwd()}"
        ) from exc
    finally:
        if added and str(Path.cwd()) in sys.path:
            sys.path.remove(str(Path.cwd()))
    file = getattr(loaded, "__file__", None)
    return loaded, Path(file).read_text(errors="replace") if file else module


def _function(module: Any, name: str, where: str) -> Any:
    function = getattr(module, name, None)
    if callable(function):
        return function
    defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
    hint = closest(name, defined)
    raise SpecError(
        f"data.function: {where} has no function {name!r}"
        + (f"; did you mean {hint!r}?" if hint else "")
        + f" (it defines: {', '.join(defined) or 'nothing callable'})"
    )


def _arrays(returned: Any, call: str) -> dict[str, np.ndarray]:
    """The named arrays of what the user's function returned."""
    if isinstance(returned, Mapping):
        unknown = sorted(set(map(str, returned)) - {*ARRAY_NAMES, *VALIDATION_NAMES})
        missing = [name for name in ARRAY_NAMES[:4] if name not in returned]
        given = [name for name in VALIDATION_NAMES if returned.get(name) is not None]
        if len(given) == 1:
            missing.append(next(name for name in VALIDATION_NAMES if name not in given))
        if unknown or missing:
            raise DataError(
                f"data.function: {call} returned a mapping with keys {sorted(map(str, returned))}; "
                f"expected {', '.join(ARRAY_NAMES[:4])}, optionally x_ood, and optionally "
                "x_validation with y_validation"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (unknown: {', '.join(unknown)})" if unknown else ""), call,
            )
        items = {
            name: returned[name] for name in (*ARRAY_NAMES, *VALIDATION_NAMES)
            if returned.get(name) is not None
        }
    elif isinstance(returned, (tuple, list)) and len(returned) in (4, 5):
        items = {name: value for name, value in zip(ARRAY_NAMES, returned) if value is not None}
    else:
        kind = f"a {len(returned)}-tuple" if isinstance(returned, (tuple, list)) else f"a {type(returned).__name__}"
        raise DataError(
            f"data.function: {call} returned {kind}; return (x_train, y_train, x_test, y_test) "
            "with an optional fifth x_ood, or a mapping with those keys", call,
        )
    arrays: dict[str, np.ndarray] = {}
    problems = []
    for name, value in items.items():
        try:
            array = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - any object a user returns
            problems.append(f"data.function: {name} cannot be read as an array ({exc})")
            continue
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            problems.append(f"data.function: {name} holds {array.dtype} values; return numbers")
        elif name.startswith("x") and array.ndim != 2:
            problems.append(f"data.function: {name} has shape {array.shape}; inputs are rows × features (2-D)")
        elif name.startswith("y") and array.ndim != 1:
            hint = " (flatten it: y.ravel())" if array.ndim == 2 and 1 in array.shape else ""
            problems.append(f"data.function: {name} has shape {array.shape}; targets are 1-D{hint}")
        arrays[name] = array
    if problems:
        raise DataError(problems, call)
    return arrays


def _shape_problems(arrays: dict[str, np.ndarray]) -> list[str]:
    problems = []
    for split in ("train", "test", "validation"):
        if f"y_{split}" not in arrays:
            continue
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if len(x) != len(y):
            problems.append(f"data.function: x_{split} has {len(x)} rows but y_{split} has {len(y)}; give one target per row")
        if len(x) == 0:
            problems.append(f"data.function: x_{split} has no rows")
    features = {name: array.shape[1] for name, array in arrays.items() if name.startswith("x")}
    if len(set(features.values())) > 1:
        shown = ", ".join(f"{name} {count}" for name, count in features.items())
        problems.append(f"data.function: the inputs differ in their number of features ({shown})")
    integer = {name: array.dtype.kind in "iub" for name, array in arrays.items() if name.startswith("y")}
    if len(set(integer.values())) > 1:
        shown = " and ".join(integer)
        problems.append(f"data.function: {shown} differ in kind (integer labels and real values); give them the same dtype")
    return problems


@DATASETS.register("python")
def python_data(
    module: str, function: str = "load", base_dir: Path | None = None, **options: Any
) -> Dataset:
    """Your own arrays from ``function`` in ``module`` (runs your code).

    Args:
        module: a ``.py`` file (relative to the spec's folder, else to the working
            directory) or an importable module name.
        function: the function to call.
        base_dir: the spec's folder.
        **options: the other keys of the spec's ``data``, passed on as keywords.

    Raises:
        SpecError: the module or function cannot be found or raised.
        DataError: what it returned is not usable arrays (shapes, dtypes, row counts).
    """
    loaded, source = _import(module, base_dir)
    where = getattr(loaded, "__file__", None) or module
    call = f"{function}({', '.join(f'{key}={value!r}' for key, value in options.items())}) of {where}"
    found = _function(loaded, function, str(where))
    files = [where] if isinstance(where, str) and where.endswith(".py") else []
    returned = run_user_code(lambda: found(**options), "data.function", f"calling {call}", files)
    arrays = _arrays(returned, call)
    problems = _shape_problems(arrays)
    if problems:
        raise DataError(problems, call)
    targets = [name for name in arrays if name.startswith("y")]
    for name in targets:  # True/False labels are classes 1/0
        arrays[name] = arrays[name].astype(np.int64) if arrays[name].dtype == np.bool_ else arrays[name]
    labels = np.concatenate([arrays[name] for name in targets])
    task, classes = target_task(labels)
    if task == "classification" and labels.min() < 0:
        task, classes = "regression", None  # negative integers are values, not class labels
    cast = np.int64 if task == "classification" else np.float32
    salt = hashlib.sha256(json.dumps([source, function, options], sort_keys=True, default=str).encode())
    return Dataset(
        arrays["x_train"].astype(np.float32), arrays["y_train"].astype(cast),
        arrays["x_test"].astype(np.float32), arrays["y_test"].astype(cast), task, classes,
        x_ood=None if "x_ood" not in arrays else arrays["x_ood"].astype(np.float32),
        source=str(where), target=f"the targets returned by {function}()", salt=salt.hexdigest(),
        x_validation=arrays["x_validation"].astype(np.float32) if "x_validation" in arrays else None,
        y_validation=arrays["y_validation"].astype(cast) if "y_validation" in arrays else None,
    )
