"""A language model's LoRA dropout turned on for a while, under a seed: the stochastic
passes of MC dropout (:mod:`bayesflow.methods.mc_dropout`).

The model is shared by every stage and method of a process and stays in eval mode
(:mod:`bayesflow.llm.source`): dropout is off for every other method. :func:`dropout_on`
sets the ``training`` flag of peft's adapter dropout modules only (the base model's own
dropout, e.g. GPT-2's ``resid_pdrop``, stays off: MC dropout here is the adapters'), seeds
torch's global generator in a forked random state, and restores both on exit, so the
caller's random state and the model are as they were.

The masks come from torch's own dropout (``nn.Dropout`` in train mode) and so from the
global generator; under ``torch.func.vmap`` over members they need
``randomness="different"`` (each member its own masks), which the member-mapping sites of
the predictive pass (:mod:`bayesflow.evaluate.predictive`, :mod:`bayesflow.evaluate.tokens`,
:mod:`bayesflow.llm.statement_scores`, :mod:`bayesflow.posterior.texts`). For a forward
with no random operation that flag changes nothing.

:func:`stochastic_passes` is what a prediction site calls: a no-op unless the method that
fitted the posterior says its members are dropout passes (its traits' ``dropout``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = ["adapter_dropouts", "dropout_on", "stochastic_passes"]


def adapter_dropouts(module: nn.Module | None) -> list[nn.Module]:
    """peft's adapter dropout modules of ``module`` with p > 0 (``…lora_dropout.<adapter>``),
    in ``named_modules`` order; none for a model without LoRA or with ``dropout: 0`` (peft
    puts an ``nn.Identity`` there)."""
    from torch import nn

    if module is None:
        return []
    return [child for name, child in module.named_modules()
            if isinstance(child, nn.Dropout) and ".lora_dropout." in f".{name}." and child.p > 0]


@contextmanager
def dropout_on(module: nn.Module | None, seed: int) -> Iterator[int]:
    """Inside: the adapter dropout of ``module`` on, torch's generators seeded with ``seed``
    (those of the module's CUDA device too). Yields how many dropout modules are on.

    The random state and the modules' flags are restored on exit, even on an error.
    """
    import torch

    dropouts = adapter_dropouts(module)
    flags = [child.training for child in dropouts]
    devices: list[Any] = []
    if module is not None:
        parameter = next(module.parameters(), None)
        if parameter is not None and parameter.device.type == "cuda":
            devices = [parameter.device]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        try:
            for child in dropouts:
                child.train(True)
            yield len(dropouts)
        finally:
            for child, flag in zip(dropouts, flags):
                child.train(flag)


def stochastic_passes(engine: str | None, module: nn.Module | None, seed: int) -> AbstractContextManager[Any]:
    """:func:`dropout_on` when the method ``engine`` fitted a posterior whose members are
    dropout passes (its traits' ``dropout``), else nothing.

    Args:
        engine: the fit's engine name (a run's ``engine`` param); None or unknown: nothing.
        module: the problem's model.
        seed: the masks' seed (a prediction site passes the seed of its draw).
    """
    from bayesflow.methods.registry import METHODS

    if engine is None or engine not in METHODS or not METHODS.get(engine).traits.dropout:
        return nullcontext()
    return dropout_on(module, seed)
