"""Causal language models (Hugging Face transformers and peft, the optional `llm` extra).

- :mod:`.source`: the frozen model, built from a config or loaded from a local folder;
- :mod:`.trainable`: LoRA adapters or parameter globs, the tensors that are inferred;
- :mod:`.problem`: the :class:`~bayesflow.engines.base.Problem` over those tensors only,
  with the next-token likelihood over each window's scored tokens;
- :mod:`.text`: documents cut into byte-token windows.

transformers and peft are imported when a model is built, never at import. docs/llm.md
says what is wired into specs and what is not yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bayesflow.errors import SpecError
from bayesflow.spec.llm import CausalLMSpec

if TYPE_CHECKING:
    from pathlib import Path

    from torch import nn

__all__ = ["build_causal_lm", "shared_causal_lm"]

# One model per distinct (model section, folder) in this process: shared_causal_lm.
_SHARED: dict[str, tuple[Any, tuple[str, ...]]] = {}


def build_causal_lm(
    config: CausalLMSpec | dict[str, Any], base_dir: Path | None = None
) -> tuple[nn.Module, tuple[str, ...]]:
    """The model of a ``causal_lm`` model section and the names of its trainable tensors.

    Raises:
        SpecError: invalid settings, the extra missing, a folder unusable, a LoRA target or
            glob naming nothing.
    """
    from bayesflow.llm.source import build_base_model
    from bayesflow.llm.trainable import apply_trainable

    spec = config if isinstance(config, CausalLMSpec) else _validated(config)
    model = build_base_model(spec, base_dir)
    return apply_trainable(model, spec.trainable)


def shared_causal_lm(
    config: CausalLMSpec | dict[str, Any], base_dir: Path | None = None
) -> tuple[nn.Module, tuple[str, ...]]:
    """:func:`build_causal_lm`, built once per process for equal settings: every stage,
    seed and chain of a run reads the one frozen model (the engines never write to it;
    ``functional_call`` swaps the trainable tensors in for one call at a time, so the
    model must not be shared by threads that run concurrently)."""
    import json

    spec = config if isinstance(config, CausalLMSpec) else _validated(config)
    key = json.dumps([spec.model_dump(mode="json"), str(base_dir)], sort_keys=True)
    if key not in _SHARED:
        _SHARED[key] = build_causal_lm(spec, base_dir)
    return _SHARED[key]


def _validated(config: dict[str, Any]) -> CausalLMSpec:
    from pydantic import ValidationError

    try:
        return CausalLMSpec.model_validate(config)
    except ValidationError as error:
        raise SpecError(f"model: {error}") from error
