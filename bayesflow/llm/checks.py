"""What ``bayesflow validate`` checks of a ``causal_lm`` spec before any weight is read.

The extra is installed; a model folder holds a config, weights and a tokenizer, its
safetensors files whole and holding the tensors its config's model has, of their shapes
(their headers read, not their tensors); a window
fits the model's context; the tokens (bytes, or the folder's tokenizer) fit its vocabulary; every LoRA target, layer and
parameter glob names something in the model (and, for a KFAC of the empirical Fisher, only linear
layers' tensors). The model's structure comes from its config
alone, built on torch's ``meta`` device (no memory, no weights: a folder's ``config.json``
is the only file read), so the check costs the same for a tiny model and for an 8B one.
Each problem is a :class:`~bayesflow.errors.SpecError` starting with the spec key at
fault (``model.trainable.lora.target_modules: ...``), which the loader points at its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bayesflow.errors import SpecError
from bayesflow.llm.extra import require
from bayesflow.llm.text import BYTE_VOCABULARY

__all__ = ["check_language_model", "structure_of"]


def structure_of(model_spec: Any, base_dir: Path | None) -> Any:
    """The model of ``model_spec`` on the meta device: its modules, parameter names and
    shapes and its config, without weights.

    Raises:
        SpecError: the extra is missing, or the folder lacks config, weights or tokenizer.
    """
    import torch

    from bayesflow.llm.source import check_folder, config_of

    transformers = require("transformers")
    if model_spec.trainable.lora is not None:
        require("peft", "model.trainable.lora")
    if model_spec.path is not None:
        folder = check_folder(model_spec.path, base_dir)
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as error:
            raise SpecError(f"model.path: {str(folder)!r}: its config.json cannot be read ({error})") from error
        config._attn_implementation = model_spec.attention
    else:
        config = config_of(model_spec)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def check_language_model(spec: Any, base_dir: Path | None) -> None:
    """Refuse a ``causal_lm`` spec that could not run (see the module docstring).

    Raises:
        SpecError: the first problem found, its message starting with the spec key.
    """
    from bayesflow.llm.problem import context_of
    from bayesflow.llm.trainable import check_lora
    from bayesflow.subset import select_tensors

    model_spec, data = spec.model, spec.data
    model = structure_of(model_spec, base_dir)
    if model_spec.path is not None:
        _check_weights(model_spec.path, base_dir, model)
    context = context_of(model)
    length = getattr(data, "length", None)
    if isinstance(length, int) and length > context:
        raise SpecError(
            f"data.length: windows of {length} tokens exceed the model's context of {context} "
            f"tokens; use length <= {context}"
        )
    vocabulary = int(getattr(model.config, "vocab_size", 0) or 0)
    if getattr(data, "tokenizer", None) == "bytes" and vocabulary < BYTE_VOCABULARY:
        key = "model.vocab_size" if model_spec.path is None else "data.tokenizer"
        raise SpecError(
            f"{key}: the byte tokenizer gives token ids 0-{BYTE_VOCABULARY - 1}, but the model's "
            f"vocabulary has {vocabulary}; use vocab_size >= {BYTE_VOCABULARY}"
            + ("" if model_spec.path is None else ", or `tokenizer: model`")
        )
    if getattr(data, "tokenizer", None) == "model" and model_spec.path is not None:
        _check_folder_vocabulary(model_spec.path, base_dir, vocabulary)
    trainable = model_spec.trainable
    if trainable.lora is not None:
        check_lora(model, trainable.lora, "model.trainable.lora")
    else:
        names = [name for name, _ in model.named_parameters()]
        chosen = select_tensors(trainable.parameters, names, "model.trainable.parameters")
        _check_kfac_tensors(spec, model, [name for name, keep in zip(names, chosen) if keep])


def _check_weights(path: str, base_dir: Path | None, model: Any) -> None:
    """The folder's safetensors files are whole and hold the tensors of ``model``, the
    config's model on the meta device, each of its shape: their headers are read, never
    their tensors (:mod:`bayesflow.llm.weights`)."""
    from bayesflow.llm.source import check_folder
    from bayesflow.llm.weights import check_tensors, folder_tensors

    folder = check_folder(path, base_dir)
    tensors = folder_tensors(folder)
    if tensors is not None:
        check_tensors(model, tensors, folder)


def _check_kfac_tensors(spec: Any, model: Any, names: list[str]) -> None:
    """KFAC (the empirical Fisher, or on multiple-choice questions the GGN too) covers the
    weights and biases of ``nn.Linear`` layers only (:func:`bayesflow.llm.kfac.linear_layers`): a glob that also takes a norm's scale
    or an embedding is refused at the globs' line, naming those tensors and the method."""
    from torch import nn

    from bayesflow.methods.registry import methods_with_curvature, traits_of

    methods = [name for name, method in spec.methods.items()
               if (traits_of(method.engine).curvature or "").startswith("kfac_")]
    if not methods:
        return
    linear = {f"{module_name}.{kind}" for module_name, module in model.named_modules()
              if isinstance(module, nn.Linear) for kind in ("weight", "bias")}
    others = [name for name in names if name not in linear]
    if others:
        shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
        engine = spec.methods[methods[0]].engine
        raise SpecError(
            f"model.trainable.parameters: {engine} (methods.{methods[0]}) covers the "
            "weights and biases of linear layers (LoRA adapters, attention and MLP projections), "
            f"but these globs also select {shown}; select only projections (for "
            "example `model.layers.1.self_attn.*_proj.*` and `model.layers.1.mlp.*`), use "
            f"LoRA, or {methods_with_curvature('diag_fisher')}"
        )


def _check_folder_vocabulary(path: str, base_dir: Path | None, vocabulary: int) -> None:
    """The folder's tokenizer must give no id past the model's vocabulary (without
    :mod:`bayesflow.llm.tokenizer` the data loader says so)."""
    from bayesflow.llm.source import check_folder

    try:
        from bayesflow.llm.tokenizer import folder_vocabulary
    except ImportError:
        return
    tokens = folder_vocabulary(check_folder(path, base_dir))
    if tokens > vocabulary:
        raise SpecError(
            f"data.tokenizer: the model folder's tokenizer has {tokens} token ids, but the model's "
            f"vocabulary has {vocabulary}; use the tokenizer the model was trained with"
        )
