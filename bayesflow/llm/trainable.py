"""Which tensors of a language model are inferred: LoRA adapters (peft, offline) or the
parameters matching glob patterns. Every other weight stays frozen in the model, held
once; the engines see the chosen tensors only (:mod:`bayesflow.llm.problem`).
"""

from __future__ import annotations

import warnings

from typing import TYPE_CHECKING

from bayesflow.errors import SpecError
from bayesflow.llm.extra import require
from bayesflow.spec.llm import LoraSpec, TrainableSpec
from bayesflow.subset import select_tensors

if TYPE_CHECKING:
    from torch import nn

__all__ = ["apply_trainable", "check_lora", "decoder_layers", "lora_targets"]


def apply_trainable(
    model: nn.Module, spec: TrainableSpec, where: str = "model.trainable"
) -> tuple[nn.Module, tuple[str, ...]]:
    """The model (wrapped by peft for LoRA) and the names of the tensors to infer, in
    ``named_parameters`` order; those tensors get ``requires_grad=True``.

    Raises:
        SpecError: a LoRA target or layer names nothing, or a glob matches no parameter
            (the message lists what exists).
    """
    if spec.lora is not None:
        model = _with_lora(model, spec.lora, f"{where}.lora")
        names = tuple(name for name, value in model.named_parameters() if value.requires_grad)
    else:
        assert spec.parameters is not None
        every = [name for name, _ in model.named_parameters()]
        chosen = select_tensors(spec.parameters, every, f"{where}.parameters")
        names = tuple(name for name, keep in zip(every, chosen) if keep)
        values = dict(model.named_parameters())
        for name in names:
            values[name].requires_grad_(True)
    return model, names


def decoder_layers(model: nn.Module) -> int:
    """How many decoder layers the model has (its config's ``num_hidden_layers``)."""
    return int(model.config.num_hidden_layers)  # type: ignore[union-attr,arg-type]


def lora_targets(model: nn.Module) -> list[str]:
    """The names (last dotted part) of the linear layers LoRA can adapt."""
    from torch import nn

    kinds: tuple[type, ...] = (nn.Linear,)
    try:  # GPT-2's projections are transformers' Conv1D, which peft adapts too
        from transformers.pytorch_utils import Conv1D

        kinds = (*kinds, Conv1D)
    except ImportError:  # pragma: no cover - the extra is checked before
        pass
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, kinds) and name})


def check_lora(model: nn.Module, spec: LoraSpec, where: str = "model.trainable.lora") -> list[int] | None:
    """The decoder layers (0-based) that get adapters (None: every one), once the targets
    and layers are checked against the model (which may live on the meta device).

    Raises:
        SpecError: a target names no linear module, or a layer is out of range (the
            message lists the module names or the layer count).
    """
    available = lora_targets(model)
    unknown = [target for target in spec.target_modules if target not in available]
    if unknown:
        raise SpecError(
            f"{where}.target_modules: {unknown} name no linear module of the model; "
            f"it has: {', '.join(available)}"
        )
    if spec.layers is None:
        return None
    count = decoder_layers(model)
    bad = [index for index in spec.layers if not -count <= index < count]
    if bad:
        raise SpecError(
            f"{where}.layers: {bad} out of range; the model has {count} decoder layers "
            f"(0 to {count - 1}, or -1 for the last)"
        )
    return sorted({index % count for index in spec.layers})


def _with_lora(model: nn.Module, spec: LoraSpec, where: str) -> nn.Module:
    peft = require("peft", where)
    layers = check_lora(model, spec, where)
    config = peft.LoraConfig(
        r=spec.r, lora_alpha=spec.alpha, target_modules=list(spec.target_modules),
        layers_to_transform=layers, lora_dropout=spec.dropout,
    )
    with warnings.catch_warnings():  # peft reads transformers' deprecated alias
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
        wrapped = peft.get_peft_model(model, config)
    wrapped.eval()
    return wrapped  # type: ignore[no-any-return]
