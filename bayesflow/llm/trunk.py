"""The frozen trunk of a causal language model, computed once for every chain and member.

When every trainable tensor lies in decoder layer ``k`` or above (a last-layer subset, LoRA
on the last layers), the hidden states entering layer ``k`` depend on the windows alone:
the embeddings and layers ``0 … k − 1`` are frozen. :class:`Trunk` splits the forward there:

- **the trunk**: the model's own forward up to layer ``k``, run without gradients and
  outside any ``vmap`` over chains, stopped by a pre-hook on layer ``k`` that records what
  the layer receives: the hidden states and the arguments every later layer reads too (the
  attention mask, the rotary cos/sin or position ids). The last result is kept, keyed by
  the windows tensor itself (its storage, shape, strides and version), so the next call on
  the same windows (the members' chunks of an evaluation, a full-batch fit's next step, a
  statement set's chunks) reuses it;
- **the head**: layers ``k …``, the final norm and the output layer, called through
  ``functional_call`` with the trainable tensors swapped in, under ``vmap`` and autograd
  as before.

Under ``vmap(forward, in_dims=(0, None))`` torch already runs the unbatched trunk once per
call; the split adds the reuse across calls and the same sharing to a loop over members.
Windows batched per chain (a :class:`~bayesflow.engines.base.ChainBatch` under ``vmap``)
run the trunk per chain and are not kept. A model whose trainable tensors include the
embeddings or layer 0, or an architecture not in :data:`LAYOUTS`, gets no trunk
(:func:`split_trunk` returns None) and runs its whole forward as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.func import functional_call

__all__ = ["LAYOUTS", "Layout", "Trunk", "split_trunk"]

# peft's LoRA wrapper keeps the causal language model here (its parameter names start so).
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class Layout:
    """Where an architecture keeps its decoder layers, final norm and output layer
    (dotted paths inside the ``*ForCausalLM`` module)."""

    layers: str
    norm: str
    head: str = "lm_head"


# Architectures whose decoder layers all read the same arguments (one causal mask, one
# rotary cos/sin): config.model_type -> layout. Others run the whole forward.
LAYOUTS = {
    "llama": Layout("model.layers", "model.norm"),
    "gpt2": Layout("transformer.h", "transformer.ln_f"),
}


class _Reached(Exception):
    """Raised by the pre-hook once the trunk's output is recorded: the rest is not run."""


@dataclass
class Entered:
    """What the first trainable module receives: its positional and keyword arguments
    (the hidden states first, or as ``hidden_states``)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def hidden(self) -> Tensor:
        return self.args[0] if self.args else self.kwargs["hidden_states"]  # type: ignore[no-any-return]

    def call(self, module: nn.Module, hidden: Tensor) -> Tensor:
        """``module`` on ``hidden`` with the recorded arguments; its hidden states out."""
        if self.args:
            out = module(hidden, *self.args[1:], **self.kwargs)
        else:
            out = module(**{**self.kwargs, "hidden_states": hidden})
        return out[0] if isinstance(out, tuple) else out  # type: ignore[no-any-return]


class _Head(nn.Module):
    """Layers ``start …``, the final norm and the output layer of ``model``; a module so
    that ``functional_call`` can swap the trainable tensors in by their own names
    (prefixed ``model.``)."""

    def __init__(self, model: nn.Module, trunk: Trunk) -> None:
        super().__init__()
        self.model = model
        self.trunk = [trunk]  # a list: not a submodule

    def forward(self, entered: Entered, keep: int) -> Tensor:
        trunk = self.trunk[0]
        hidden = entered.hidden()
        for layer in trunk.layers[trunk.start :]:
            hidden = entered.call(layer, hidden)
        hidden = trunk.norm(hidden)
        if keep > 0:  # transformers' logits_to_keep: 0 keeps every position
            hidden = hidden[..., -keep:, :]
        return trunk.head(hidden)  # type: ignore[no-any-return]


@dataclass
class Trunk:
    """The model split before decoder layer ``start`` (module docstring).

    Attributes:
        root: the ``*ForCausalLM`` module (inside peft's wrapper for LoRA).
        layers: its decoder layers.
        start: the first layer holding a trainable tensor (``len(layers)``: only the
            final norm or the output layer trains).
        norm, head: its final norm and output layer.
    """

    root: nn.Module
    layers: nn.ModuleList
    start: int
    norm: nn.Module
    head: nn.Module
    _module: _Head | None = None
    _kept: list[Any] = field(default_factory=list)

    def entered(self, inputs: Tensor) -> Entered:
        """What layer ``start`` receives for the windows ``inputs``: the last windows'
        result when ``inputs`` is the same tensor, unchanged; computed without gradients."""
        key = _key(inputs)
        if key is not None and self._kept and self._kept[1] == key:
            return self._kept[2]  # type: ignore[no-any-return]
        target = self.layers[self.start] if self.start < len(self.layers) else self.norm
        recorded: list[Entered] = []

        def record(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            recorded.append(Entered(args, dict(kwargs)))
            raise _Reached

        handle = target.register_forward_pre_hook(record, with_kwargs=True)
        try:
            with torch.no_grad():
                self.root(inputs, use_cache=False)
        except _Reached:
            pass
        finally:
            handle.remove()
        entered = recorded[0]
        if key is not None:  # the windows are held, so their address cannot be reused
            self._kept[:] = [inputs, key, entered]
        return entered

    def logits(self, model: nn.Module, swapped: dict[str, Tensor], inputs: Tensor, keep: int) -> Tensor:
        """The logits of the last ``keep`` positions, the trainable tensors ``swapped``
        (by their names in ``model``) into the head."""
        if self._module is None:
            self._module = _Head(model, self)
        named = {f"model.{name}": value for name, value in swapped.items()}
        return functional_call(self._module, named, (self.entered(inputs), keep), strict=False)  # type: ignore[no-any-return]


def _key(inputs: Tensor) -> tuple[Any, ...] | None:
    """What identifies unchanged windows while their storage is held; None for windows
    that must not be kept (batched per chain under ``vmap``, or traced by a compiler)."""
    if is_functorch_wrapped_tensor(inputs) or torch.compiler.is_compiling():
        return None
    return (inputs.data_ptr(), tuple(inputs.shape), inputs.stride(), inputs._version, inputs.dtype, inputs.device)


def split_trunk(model: nn.Module, names: tuple[str, ...]) -> Trunk | None:
    """The trunk of ``model`` below its first trainable decoder layer, or None where
    nothing is shared: an unknown architecture, or a trainable tensor in the embeddings
    or layer 0 (or anywhere outside the decoder layers, final norm and output layer)."""
    prefix = PEFT_PREFIX if names and all(name.startswith(PEFT_PREFIX) for name in names) else ""
    try:
        root = model.get_submodule(prefix[:-1]) if prefix else model
        layout = LAYOUTS.get(getattr(root.config, "model_type", ""))
        if layout is None:
            return None
        layers = root.get_submodule(layout.layers)
        norm, head = root.get_submodule(layout.norm), root.get_submodule(layout.head)
    except AttributeError:
        return None
    if not isinstance(layers, nn.ModuleList) or not names:
        return None
    start = len(layers)
    for name in names:
        local = name[len(prefix) :]
        if local.startswith(layout.layers + "."):
            index = local[len(layout.layers) + 1 :].split(".", 1)[0]
            start = min(start, int(index))
        elif not local.startswith((layout.norm + ".", layout.head + ".")):
            return None
    if start == 0:
        return None
    return Trunk(root, layers, start, norm, head)
