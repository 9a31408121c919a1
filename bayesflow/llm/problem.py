"""A causal language model as a :class:`~bayesflow.engines.base.Problem` over its
trainable tensors only.

The flat vector the engines see holds the trainable tensors (LoRA adapters, a last
decoder layer): small. The frozen weights stay in the model, held once (never flattened,
never copied per chain, seed or stage); the forward pass is
``functional_call(model, trainable, inputs, strict=False)``, which swaps in only the
trainable entries, so under ``vmap`` over chains the frozen weights are shared. When the
trainable tensors start at decoder layer k > 0, the frozen layers below k run once per
window for every chain, member and epoch (:mod:`bayesflow.llm.trunk`).

The trainable state is float32 ("master weights") and is cast to each tensor's own dtype
(the frozen weights' ``dtype``, or peft's float32 adapters) inside the forward; the
scored logits come back as float32.

The likelihood is the next-token categorical over the last ``scored`` positions of each
window: inputs are token windows (n, L), targets their last ``scored`` tokens (n, S), and
every scored token is one datum, so ``num_data`` is windows × scored tokens and the
temperature convention (U = −Σ log p(token) − log p(θ)) holds as for any other model.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call

from bayesflow.engines.base import Problem
from bayesflow.errors import SpecError
from bayesflow.llm.likelihood import NextToken
from bayesflow.llm.trunk import kept_budget, split_trunk
from bayesflow.priors import Prior

__all__ = ["NextToken", "build_lm_problem", "check_window", "context_of", "trainable_values"]


def context_of(model: nn.Module) -> int:
    """The longest sequence the model's position embeddings (or rotary limit) allow."""
    config = model.config  # type: ignore[union-attr]
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise SpecError("model: its config gives no context length (max_position_embeddings)")


def check_window(model: nn.Module, length: int, scored: int, where: str = "data") -> None:
    """Refuse windows the model cannot read, or a scored part that leaves no context.

    Raises:
        SpecError: ``length`` exceeds the model's context, or ``scored`` is not in [1, length).
    """
    context = context_of(model)
    if length > context:
        raise SpecError(
            f"{where}.length: windows of {length} tokens exceed the model's context of "
            f"{context} tokens; use length <= {context}"
        )
    if not 1 <= scored < length:
        raise SpecError(f"{where}.scored: {scored} must be at least 1 and below the window length {length}")


def trainable_values(model: nn.Module, names: tuple[str, ...]) -> dict[str, Tensor]:
    """The model's own tensors of ``names`` (not copies)."""
    values = dict(model.named_parameters())
    return {name: values[name] for name in names}


def build_lm_problem(
    model: nn.Module,
    names: tuple[str, ...],
    prior: Prior,
    num_data: int,
    scored: int,
    device: torch.device | str = "cpu",
    share_trunk: bool = True,
) -> Problem:
    """The problem over the tensors ``names`` of ``model``, the rest frozen in place.

    Args:
        model: the language model (peft-wrapped for LoRA), on ``device``, in eval mode.
        names: its trainable tensors (:func:`bayesflow.llm.trainable.apply_trainable`).
        prior: the prior over the trainable tensors.
        num_data: N, the number of scored training tokens (windows × ``scored``).
        scored: S, how many of each window's last tokens are scored; the logits of
            positions L − S − 1 … L − 2 predict tokens L − S … L − 1 (only the last S + 1
            positions go through the output layer).
        device: where the model and the data live.
        share_trunk: compute the frozen layers below the first trainable one once per
            window for every chain, member and epoch (:mod:`bayesflow.llm.trunk`); False runs
            the whole forward in every call (the reference the tests compare against).
    """
    device = torch.device(device)
    trunk = split_trunk(model, names, kept_budget(device)) if share_trunk else None
    likelihood = NextToken()
    tensors = trainable_values(model, names)
    shapes = tuple(tuple(value.shape) for value in tensors.values())
    dtypes = tuple(value.dtype for value in tensors.values())
    sizes = [math.prod(shape) for shape in shapes]
    # One variance for every entry (the usual N(0, v)): the prior's (d,) vectors are
    # views of one number, not 2·d floats beside the state (docs/llm.md, "Measured").
    bound_prior = prior.bind(names, shapes, torch.float32, device, compact=True)
    def logits(params: Tensor, inputs: Tensor, keep: int, at: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """The float32 logits of the last ``keep`` positions (transformers'
        ``logits_to_keep``: the other positions' logits are never formed), (n, keep, V);
        with ``at``, (window, position) index tensors into those, only theirs, (P, V)
        (with a shared trunk the output layer sees only those positions)."""
        pieces = params.split(sizes)
        swapped = {name: piece.reshape(shape).to(dtype)
                   for name, piece, shape, dtype in zip(names, pieces, shapes, dtypes)}
        if trunk is not None:
            return trunk.logits(model, swapped, inputs.long(), keep, at).float()
        options = {"use_cache": False, "logits_to_keep": keep}
        out = functional_call(model, swapped, (inputs.long(),), options, strict=False).logits.float()
        return out if at is None else out[at[0], at[1]]

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        return logits(params, inputs, scored + 1)[..., :-1, :]

    def without_last(params: Tensor, inputs: Tensor) -> Tensor:
        """The same scored logits from the windows without their last token, which no
        scored logit reads (causal attention): the model never sees that position."""
        return logits(params, inputs[..., :-1], scored)

    def init_params(generator: torch.Generator) -> Tensor:
        """LoRA ``A`` drawn as peft draws it (Kaiming uniform, a = √5) under ``generator``,
        ``B`` zero (the adapted model starts equal to the base); any other trainable tensor
        starts at the model's value (fine-tuning starts from the pretrained weights)."""
        pieces = []
        for name, shape in zip(names, shapes):
            if ".lora_A." in name:
                fresh = torch.empty(shape)
                nn.init.kaiming_uniform_(fresh, a=math.sqrt(5), generator=_cpu(generator))
                pieces.append(fresh.reshape(-1).to(device))
            elif ".lora_B." in name:
                pieces.append(torch.zeros(math.prod(shape), device=device))
            else:  # read from the model when asked: the problem keeps no copy
                pieces.append(tensors[name].detach().reshape(-1).to(device, torch.float32))
        return torch.cat(pieces)

    return Problem(
        forward=forward,
        log_likelihood=likelihood.log_prob,
        output_hessian=likelihood.output_hessian,
        log_prior=bound_prior.log_prob,
        prior_precision=bound_prior.precision,
        num_data=num_data,
        dimension=sum(sizes),
        param_names=names,
        param_shapes=shapes,
        init_params=init_params,
        likelihood=likelihood.name,
        device=device,
        observation=likelihood,
        module=model,
        logits=logits,  # any last positions: bayesflow.llm.statement_scores, posterior texts
        without_last=without_last,  # bayesflow.llm.kfac
    )


def _cpu(generator: torch.Generator) -> torch.Generator:
    """A CPU generator seeded from ``generator`` (the same start on every device)."""
    if generator.device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
    return torch.Generator().manual_seed(seed)
