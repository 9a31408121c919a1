"""A language model's posterior as files: the trainable part only, plus a reference to the
base model.

``posterior.npz`` is the contract's file (DESIGN.md) over the trainable tensors (their
``param_names`` are the LoRA adapters or the globbed tensors); ``base_model.json`` holds the
``causal_lm`` model section (a config with the ``seed`` of its random weights, or a local
folder's path: weights are never copied). Loading rebuilds the base model from that reference and checks the tensors' names and shapes against the file.

A run's fit logs ``posterior/posterior.npz`` and ``posterior/base_model.json``, so a
downloaded ``posterior`` folder is a :func:`load_lm_posterior` source; ``bayesflow.load_posterior``
reads the same fit from its run id with the run's resolved spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn

from bayesflow.engines.base import Posterior, Problem
from bayesflow.spec.llm import CausalLMSpec

__all__ = ["ARRAYS", "REFERENCE", "LoadedLM", "absolute_path", "base_model_text", "load_lm_posterior",
           "save_lm_posterior"]

REFERENCE = "base_model.json"
ARRAYS = "posterior.npz"


@dataclass(frozen=True)
class LoadedLM:
    """A loaded language-model posterior.

    Attributes:
        model: the rebuilt base model (peft-wrapped for LoRA), frozen.
        problem: its problem over the trainable tensors (no prior, N = 1: for predicting).
        posterior: the posterior over the trainable tensors.
    """

    model: nn.Module
    problem: Problem
    posterior: Posterior


def save_lm_posterior(
    folder: Path, spec: CausalLMSpec, scored: int, problem: Problem, posterior: Posterior
) -> None:
    """Write ``posterior.npz`` (trainable tensors only) and ``base_model.json``.

    Args:
        folder: where to write (created).
        spec: the model section the problem was built from.
        scored: tokens scored per window.
        problem: the subset problem (its names and shapes label the arrays).
        posterior: its posterior.
    """
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / ARRAYS, **posterior.to_arrays(problem))  # type: ignore[arg-type]  # numpy stubs: **arrays
    (folder / REFERENCE).write_text(base_model_text(spec, scored))


def base_model_text(spec: CausalLMSpec, scored: int, base_dir: Path | None = None) -> str:
    """The text of ``base_model.json``: the model section (a config-built model's ``seed``
    included; a folder by its path, made absolute from ``base_dir`` when given) and the
    tokens scored per window."""
    model = spec.model_dump(mode="json")
    if base_dir is not None and isinstance(model.get("path"), str):
        model["path"] = absolute_path(model["path"], base_dir)
    return json.dumps({"model": model, "scored": scored}, indent=2) + "\n"


def absolute_path(path: str, base_dir: Path | None) -> str:
    """A relative model folder ``path`` made absolute from ``base_dir`` (default the working
    directory); an absolute, ``package:`` or ``models:`` path as it is (``package:`` resolves
    inside the installed bayesflow, ``models:`` in the model cache, wherever it is loaded)."""
    if path.startswith(("package:", "models:")) or Path(path).expanduser().is_absolute():
        return path
    return str(((base_dir or Path.cwd()) / path).resolve())


def load_lm_posterior(folder: Path, base_dir: Path | None = None) -> LoadedLM:
    """Rebuild the base model from ``base_model.json`` and read the posterior.

    Raises:
        PosteriorError: a file is missing, or the rebuilt model's trainable tensors differ
            from the file's.
    """
    from bayesflow.llm import build_causal_lm
    from bayesflow.llm.problem import build_lm_problem
    from bayesflow.posterior.files import PosteriorError
    from bayesflow.priors import none

    missing = [name for name in (REFERENCE, ARRAYS) if not (folder / name).is_file()]
    if missing:
        raise PosteriorError(f"{str(folder)!r} lacks {', '.join(missing)}: not a saved language-model posterior")
    reference = json.loads((folder / REFERENCE).read_text())
    with np.load(folder / ARRAYS) as stored:
        arrays = {name: stored[name] for name in stored.files}
    model, names = build_causal_lm(reference["model"], base_dir)
    problem = build_lm_problem(model, names, none(), 1, int(reference["scored"]))
    shapes = ["x".join(map(str, shape)) or "scalar" for shape in problem.param_shapes]
    if list(names) != arrays["param_names"].tolist() or shapes != arrays["param_shapes"].tolist():
        raise PosteriorError(
            f"{str(folder)!r}: the rebuilt model's trainable tensors ({len(names)}) are not the "
            f"file's ({len(arrays['param_names'])}); was the base model changed?"
        )
    return LoadedLM(model, problem, Posterior.from_arrays(arrays))
