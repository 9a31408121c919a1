"""The frozen trunk of a causal language model, computed once for every chain and member.

When every trainable tensor lies in decoder layer ``k`` or above (a last-layer subset, LoRA
on the last layers), the hidden states entering layer ``k`` depend on the windows alone:
the embeddings and layers ``0 … k − 1`` are frozen. :class:`Trunk` splits the forward there:

- **the trunk**: the model's own forward up to layer ``k``, run without gradients and
  outside any ``vmap`` over chains, stopped by a pre-hook on layer ``k`` that records what
  the layer receives: the hidden states and the arguments every later layer reads too (the
  attention mask, the rotary cos/sin or position ids). Each window's hidden states are
  kept, keyed by its tokens, while they fit :func:`kept_budget` (a quarter of the memory
  budget), so a window met again (in the next epoch of a fit, by the next member of an
  ensemble, in the next chunk of an evaluation or statement set, or by the next stage in
  the same worker process over the same frozen weights, :func:`fingerprint`) is read back
  rather than computed; only the windows not yet kept run through the trunk;
- **the head**: layers ``k …``, the final norm and the output layer, called through
  ``functional_call`` with the trainable tensors swapped in, under ``vmap`` and autograd
  as before.

Under ``vmap(forward, in_dims=(0, None))`` torch already runs the unbatched trunk once per
call; the split adds the reuse across calls (epochs, members, chunks).
Windows batched per chain (a :class:`~bayesflow.engines.base.ChainBatch` under ``vmap``:
each chain its own minibatches, as parallel SGHMC draws them) are unwrapped to the plain
(K, n, L) tokens underneath, looked up and computed as K·n windows outside the ``vmap``, and
handed back batched per chain: they share the kept windows too. A model whose trainable tensors include the
embeddings or layer 0, or an architecture not in :data:`LAYOUTS`, gets no trunk
(:func:`split_trunk` returns None) and runs its whole forward as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch._C._functorch import (
    _add_batch_dim,
    get_unwrapped,
    is_batchedtensor,
    is_functorch_wrapped_tensor,
    maybe_get_bdim,
    maybe_get_level,
)
from torch.func import functional_call

__all__ = ["KEPT_SHARE", "LAYOUTS", "Kept", "Layout", "Trunk", "fingerprint", "forget_kept", "kept_budget", "split_trunk"]

# Keyword arguments of the model's forward made from the windows (left-padded prompts).
Arguments = Callable[[Tensor], dict[str, Tensor]]

# peft's LoRA wrapper keeps the causal language model here (its parameter names start so).
PEFT_PREFIX = "base_model.model."
# The token id of left padding in a prompt (bayesflow.data.multiple_choice.PADDING).
PADDING = -1
# The share of the memory budget a trunk may fill with kept hidden states (the rest is
# for the forward passes, the chains and the data).
KEPT_SHARE = 0.25


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

    def forward(self, entered: Entered, keep: int, at: tuple[Tensor, Tensor] | Tensor | None = None) -> Tensor:
        trunk = self.trunk[0]
        hidden = entered.hidden()
        for layer in trunk.layers[trunk.start :]:
            hidden = entered.call(layer, hidden)
        hidden = trunk.norm(hidden)
        if keep > 0:  # transformers' logits_to_keep: 0 keeps every position
            hidden = hidden[..., -keep:, :]
        if isinstance(at, Tensor):  # flat (window × position) indices: only those reach the output layer
            hidden = hidden.flatten(0, 1)[at]
        elif at is not None:  # only these (window, position) pairs reach the output layer
            hidden = hidden[at[0], at[1]]
        return trunk.head(hidden)  # type: ignore[no-any-return]


@dataclass
class Kept:
    """Hidden states kept per window (keyed by its tokens) and the bytes they take."""

    rows: dict[bytes, Tensor] = field(default_factory=dict)
    bytes: int = 0
    fingerprint: str = ""


# The kept windows of the last trunk this process split, by the fingerprint of its frozen
# part: the next problem over the same frozen weights (the next stage in a worker process:
# another method, seed or evaluation) reads them back. One entry: a process that moves to
# other weights lets the old ones go.
_LAST: list[Kept] = []


def fingerprint(root: nn.Module, layers: nn.ModuleList, start: int) -> str:
    """What identifies the frozen part below layer ``start``: the model's config, the start,
    and every parameter outside layers ``start …`` by name, shape, dtype and 4,096 of its
    values taken evenly (different weights differ there; reading them all would cost as
    much as a forward pass on a large model)."""
    digest = hashlib.blake2b(digest_size=16)
    config = getattr(root, "config", None)
    digest.update((config.to_json_string() if config is not None else type(root).__name__).encode())
    digest.update(f"start={start}".encode())
    above = {id(value) for layer in layers[start:] for value in layer.parameters()}
    for name, value in root.named_parameters():
        if id(value) in above:
            continue
        flat = value.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // 4096)][:4096].float().cpu().numpy()
        digest.update(f"{name}:{tuple(value.shape)}:{value.dtype}".encode())
        digest.update(sample.tobytes())
    return digest.hexdigest()


@dataclass
class Trunk:
    """The model split before decoder layer ``start`` (module docstring).

    Attributes:
        root: the ``*ForCausalLM`` module (inside peft's wrapper for LoRA).
        layers: its decoder layers.
        start: the first layer holding a trainable tensor (``len(layers)``: only the
            final norm or the output layer trains).
        norm, head: its final norm and output layer.
        budget: bytes the kept hidden states may take (:func:`kept_budget`); windows
            beyond it run through the trunk in every call.
        computed: windows run through the trunk so far (the others were read back).
    """

    root: nn.Module
    layers: nn.ModuleList
    start: int
    norm: nn.Module
    head: nn.Module
    budget: int = 0
    computed: int = 0
    _module: _Head | None = None
    kept: Kept = field(default_factory=lambda: Kept())

    @property
    def _rows(self) -> dict[bytes, Tensor]:
        return self.kept.rows

    def entered(self, inputs: Tensor, arguments: Arguments | None = None) -> Entered:
        """What layer ``start`` receives for the windows ``inputs`` (computed without
        gradients). Each window's hidden states are kept, keyed by its tokens, while they
        fit the budget: a window met again (the next epoch, the next member, the next
        chunk) is read back, and only the windows not kept run through the trunk.
        Windows batched per chain under ``vmap`` (a ``ChainBatch``: (K, n, L) underneath)
        are read as K·n plain windows outside the ``vmap``, and their hidden states are
        handed back batched per chain. ``arguments`` makes the model's keyword arguments
        from the windows (left-padded prompts: their ids, positions and attention mask;
        :mod:`bayesflow.llm.choices`); by default the model reads the windows as they are."""
        target = self.layers[self.start] if self.start < len(self.layers) else self.norm
        per_chain = _per_chain_windows(inputs)
        if per_chain is not None:
            windows, level = per_chain
            with torch._C._DisableFuncTorch():  # plain tensors, outside every transform
                rows = self._hidden(windows.reshape(-1, windows.shape[-1]), target, arguments)
                rows = rows.reshape(*windows.shape[:-1], *rows.shape[1:])
            hidden = _add_batch_dim(rows, 0, level)
            return _swapped(_record(self.root, inputs, self.layers[0], arguments), hidden)
        if not _keepable(inputs):
            self.computed += int(inputs.shape[0]) if inputs.dim() == 2 else 1
            return _record(self.root, inputs, target, arguments)
        hidden = self._hidden(inputs, target, arguments)
        # Every decoder layer reads the same arguments (LAYOUTS): layer 0's, for these
        # windows (their embeddings, masks and positions only: cheap), the hidden states swapped.
        return _swapped(_record(self.root, inputs, self.layers[0], arguments), hidden)

    def _hidden(self, inputs: Tensor, target: nn.Module, arguments: Arguments | None = None) -> Tensor:
        """The hidden states entering ``target`` for the plain windows ``inputs`` (n, L):
        kept rows read back, the others computed (and kept while there is room).

        Left-padded prompts (``arguments`` given; padding ``-1``) are kept by their tokens
        without the padding, and computed without it, prompts of one length together: the
        padding is masked from every real position, so a prompt's hidden states do not
        depend on it, and a batch cut to its longest prompt (:func:`trimmed`) reads the
        same kept rows. Padded positions read back as zeros (masked: nothing reads them)."""
        plain = inputs.detach().cpu().numpy()
        padded = arguments is not None
        starts = [int(np.argmax(row != PADDING)) if padded else 0 for row in plain]
        keys = [row[start:].tobytes() for row, start in zip(plain, starts)]
        first: dict[bytes, int] = {}
        for index, key in enumerate(keys):
            if key not in self._rows:
                first.setdefault(key, index)  # each new window once
        if len(first) == len(keys) and not self._room(len(keys), inputs):
            self.computed += len(keys)  # nothing kept and no room: the plain trunk
            return _record(self.root, inputs, target, arguments).hidden()
        positions = int(arguments(inputs[:1])["input_ids"].shape[-1]) if arguments is not None else inputs.shape[-1]
        fresh: dict[bytes, Tensor] = {}
        by_length: dict[int, list[bytes]] = {}
        for key, index in first.items():
            by_length.setdefault(inputs.shape[-1] - starts[index], []).append(key)
        for length, group in by_length.items():
            rows = torch.stack([inputs[first[key], inputs.shape[-1] - length:] for key in group])
            hidden = _record(self.root, rows, target, arguments).hidden()
            self.computed += len(group)
            for row, key in enumerate(group):
                fresh[key] = hidden[row]
                if self._room(1, inputs):
                    self._rows[key] = hidden[row].clone()
                    self.kept.bytes += hidden[row].numel() * hidden.element_size()
        found = [self._rows[key] if key in self._rows else fresh[key] for key in keys]
        if all(len(row) == positions for row in found):
            return torch.stack(found)
        out = found[0].new_zeros(len(found), positions, found[0].shape[-1])
        for row, value in enumerate(found):
            out[row, positions - len(value):] = value
        return out

    def _room(self, windows: int, inputs: Tensor) -> bool:
        """Whether ``windows`` more windows of ``inputs``' length fit the budget."""
        config = self.root.config
        width = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0))
        per_window = int(inputs.shape[-1]) * width * _element_size(self.root)
        return self.kept.bytes + windows * per_window <= self.budget

    def logits(self, model: nn.Module, swapped: dict[str, Tensor], inputs: Tensor, keep: int,
               at: tuple[Tensor, Tensor] | Tensor | None = None, arguments: Arguments | None = None) -> Tensor:
        """The logits of the last ``keep`` positions (with ``at``, (windows, positions)
        index tensors into them, or flat indices into their windows × positions: only those), the
        trainable tensors ``swapped`` (by their
        names in ``model``) into the head; ``arguments`` as for :meth:`entered`."""
        if self._module is None:
            self._module = _Head(model, self)
        named = {f"model.{name}": value for name, value in swapped.items()}
        return functional_call(self._module, named, (self.entered(inputs, arguments), keep, at), strict=False)  # type: ignore[no-any-return]


def _record(root: nn.Module, inputs: Tensor, target: nn.Module, arguments: Arguments | None = None) -> Entered:
    """What ``target`` receives when ``root`` runs on ``inputs`` (no gradients; the forward
    stops there); with ``arguments``, on the keyword arguments it makes of them."""
    recorded: list[Entered] = []

    def record(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        recorded.append(Entered(args, dict(kwargs)))
        raise _Reached

    handle = target.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            if arguments is None:
                root(inputs, use_cache=False)
            else:
                root(**arguments(inputs), use_cache=False)
    except _Reached:
        pass
    finally:
        handle.remove()
    return recorded[0]


def _swapped(base: Entered, hidden: Tensor) -> Entered:
    """``base``'s arguments with ``hidden`` as the hidden states."""
    if base.args:
        return Entered((hidden, *base.args[1:]), base.kwargs)
    return Entered(base.args, {**base.kwargs, "hidden_states": hidden})


def _per_chain_windows(inputs: Tensor) -> tuple[Tensor, int] | None:
    """For windows batched by one ``vmap`` (a ``ChainBatch``; the windows of a chunk under
    the token curvature's ``vmap``), the plain (K, n, L) tokens underneath and the
    ``vmap``'s level; None for anything else (shared windows, nested ``vmap``s, a
    compiler's trace). A gradient transform's wrapper around the tokens (``jacrev``,
    ``grad``) is looked through: tokens carry no gradient."""
    if torch.compiler.is_compiling():
        return None
    batched = inputs
    while is_functorch_wrapped_tensor(batched) and not is_batchedtensor(batched):
        batched = get_unwrapped(batched)
    if not is_batchedtensor(batched) or batched.dim() != 2:
        return None
    plain = get_unwrapped(batched)
    if is_functorch_wrapped_tensor(plain) or plain.dim() != 3:
        return None
    return plain.movedim(maybe_get_bdim(batched), 0), maybe_get_level(batched)


def largest(values: Tensor) -> int | None:
    """The largest of integer ``values`` read through every ``torch.func`` wrapper (a
    ``vmap``'s batching: every chain's values at once; a gradient transform's tracking), so
    a forward can size a tensor by its batch; None under a compiler's trace or when empty."""
    if torch.compiler.is_compiling():
        return None
    while is_functorch_wrapped_tensor(values):
        values = get_unwrapped(values)
    with torch._C._DisableFuncTorch():  # a plain tensor, outside every transform
        return int(values.max()) if values.numel() else None


def trimmed(inputs: Tensor, trailing: int = 0) -> Tensor:
    """Left-padded prompts (..., L + ``trailing``; padding ``-1``, then ``trailing`` columns
    that are not tokens) without the padding columns every prompt of the batch has: cut to
    the batch's longest prompt (under a compiler's trace: as they are)."""
    tokens = inputs[..., : inputs.shape[-1] - trailing] if trailing else inputs
    longest = largest((tokens != PADDING).sum(-1))
    width = tokens.shape[-1]
    return inputs if longest is None or longest >= width else inputs[..., width - longest :]


def _element_size(module: nn.Module) -> int:
    """Bytes per element of ``module``'s floating-point weights (its hidden states' dtype)."""
    for value in module.parameters():
        if value.is_floating_point():
            return int(value.element_size())
    return 4


def _keepable(inputs: Tensor) -> bool:
    """Whether the windows ``inputs`` can be read as plain tokens (a matrix, not batched
    per chain under ``vmap``, nor traced by a compiler)."""
    return inputs.dim() == 2 and not (is_functorch_wrapped_tensor(inputs) or torch.compiler.is_compiling())


def kept_budget(device: torch.device | str) -> int:
    """Bytes a trunk may keep: :data:`KEPT_SHARE` of the memory budget of
    :mod:`bayesflow.engines.memory` (``BAYESFLOW_MEMORY_LIMIT``, or the device's free memory)."""
    from bayesflow.engines.memory import memory_budget

    return int(KEPT_SHARE * memory_budget(torch.device(device)))


def split_trunk(model: nn.Module, names: tuple[str, ...], budget: int = 0) -> Trunk | None:
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
    kept = _shared_kept(fingerprint(root, layers, start))
    return Trunk(root, layers, start, norm, head, budget, kept=kept)


def forget_kept() -> None:
    """Drop the windows this process keeps (a benchmark's fresh start; the next trunk
    computes every window again)."""
    _LAST.clear()


def _shared_kept(key: str) -> Kept:
    """This process's kept windows for the frozen part ``key`` (new when it changed)."""
    if not _LAST or _LAST[0].fingerprint != key:
        _LAST[:] = [Kept(fingerprint=key)]
    return _LAST[0]
