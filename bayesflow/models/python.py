"""A user's own torch module: the one escape hatch from the model registry.

This runs your code. A spec such as::

    model:
      name: python
      python: mypackage.networks:make_net
      width: 32            # any further keys are passed to the factory

makes bayesflow import ``mypackage.networks`` and call
``make_net(num_features=..., num_outputs=..., width=32)``. The module is imported with
the working directory on ``sys.path`` (as ``python -m`` would) or from the installed
packages. The factory must return a ``torch.nn.Module``; bayesflow uses it exactly like
the built-in networks, through ``torch.func.functional_call`` on a flat vector of its
``named_parameters()`` (buffers stay fixed). So ``forward`` must be a function of the
parameters and the inputs only: no in-place changes to parameters and, for engines that
``vmap`` over chains or samples, no Python branches on tensor values.

The stage cache is keyed on the spec, not on your module's source: after editing the
module, clear the cache folder (``execution.cache_dir``) or change a key of ``model``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from bayesflow.errors import SpecError
from bayesflow.models.registry import MODELS
from bayesflow.registry import closest
from bayesflow.user_code import run_user_code, user_frame

__all__ = ["load_factory", "python_model"]


@contextmanager
def _working_directory_on_path() -> Iterator[None]:
    """Put the working directory first on ``sys.path`` while importing (console scripts
    such as ``bayesflow`` start with their own folder there, not the working directory)."""
    folder = os.getcwd()
    added = folder not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _module_file(module_name: str) -> list[str]:
    """The file of a top-level module (found without running it), to name the user's line
    in messages; a dotted name would import its parent packages to be found, so none."""
    if "." in module_name:
        return []
    try:
        with _working_directory_on_path():
            found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return []
    return [found.origin] if found is not None and found.origin else []


def _import(module_name: str) -> Any:
    """Import ``module_name``, turning failures into errors that say what to do (a
    SyntaxError, an exception, ``sys.exit`` or an endless loop at import: see
    :func:`bayesflow.user_code.run_user_code`)."""
    importlib.invalidate_caches()  # see modules written since the interpreter started
    files = _module_file(module_name)
    try:
        with _working_directory_on_path():
            return run_user_code(
                lambda: importlib.import_module(module_name), "model.python",
                f"importing module {module_name!r}", files, passthrough=(ModuleNotFoundError,),
            )
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise SpecError(
                f"model.python: cannot import module {module_name!r} ({exc}); the module "
                f"must be importable from the working directory ({os.getcwd()}) or installed "
                "in this environment (for example `pip install -e .` in your project)"
            ) from exc
        where = user_frame(exc, files)
        raise SpecError(
            f"model.python: module {module_name!r} was found, but importing it failed: "
            f"{exc}{f' at {where}' if where else ''}; install {missing!r} in this environment"
        ) from exc


def load_factory(target: str) -> Callable[..., Any]:
    """Import the factory named ``"package.module:function"`` (this runs the module).

    Raises:
        SpecError: naming the module or attribute that could not be found and the fix.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SpecError(f"model.python: expected `package.module:factory`, got {target!r}")
    module = _import(module_name)
    factory: Any = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            defined = sorted(
                name
                for name, value in vars(module).items()
                if callable(value) and not name.startswith("_")
            )
            hint = closest(part, defined)
            suggestion = f"; did you mean {hint!r}?" if hint else ""
            where = getattr(module, "__file__", None) or module_name
            listed = ", ".join(defined) or "nothing callable"
            raise SpecError(
                f"model.python: module {module_name!r} ({where}) has no attribute "
                f"{attribute!r}{suggestion} (it defines: {listed})"
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise SpecError(
            f"model.python: {target!r} is a {type(factory).__name__}, not a function; "
            "name a function that returns a torch.nn.Module"
        )
    return factory  # type: ignore[no-any-return]


@MODELS.register("python")
def python_model(num_features: int, num_outputs: int, python: str, **options: Any) -> nn.Module:
    """Your own torch module from ``python: package.module:factory`` (runs your code).

    Args:
        num_features: passed to the factory as ``num_features``.
        num_outputs: passed to the factory as ``num_outputs``.
        python: ``package.module:factory``.
        **options: the other keys of the spec's ``model``, passed on as keywords.
    """
    factory = load_factory(python)
    arguments = {"num_features": num_features, "num_outputs": num_outputs, **options}
    call = f"{python}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"
    files = _factory_file(factory)
    try:
        module = run_user_code(
            lambda: factory(**arguments), "model.python", f"calling {call}", files,
            passthrough=(TypeError,),
        )
    except TypeError as exc:
        where = user_frame(exc, files)
        if where:  # raised inside the factory: a bug of the factory's own
            raise SpecError(f"model.python: {call} raised TypeError: {exc} at {where}; fix the factory") from exc
        raise SpecError(
            f"model.python: {call} raised TypeError: {exc}; the factory must accept num_features, "
            "num_outputs and the other keys of `model` as keyword arguments (its signature: "
            f"{_signature(factory)})"
        ) from exc
    if not isinstance(module, nn.Module):
        raise SpecError(
            f"model.python: {call} returned a {type(module).__name__}; expected a torch.nn.Module"
        )
    if not any(True for _ in module.parameters()):
        raise SpecError(f"model.python: {call} returned a module without parameters to infer")
    return module


def _factory_file(factory: Callable[..., Any]) -> list[str]:
    try:
        return [inspect.getfile(factory)]
    except (TypeError, OSError):
        return []


def _signature(factory: Callable[..., Any]) -> str:
    try:
        return f"{getattr(factory, '__name__', 'factory')}{inspect.signature(factory)}"
    except (TypeError, ValueError):
        return "unknown"

