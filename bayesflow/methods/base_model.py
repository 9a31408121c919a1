"""The base model: no fit at all, a point mass where every other fit would start.

``base`` makes "the model before any training" a row of a comparison, the first column
of the posteriors paper's Tables 1 and 2 (Duffield et al., 2025, Section 5.3: the
pretrained Llama 3 without fine-tuning beside SGD, the deep ensemble and SGHMC). Its
posterior is ``Posterior(mean=θ₀, var=0)`` with θ₀ the fit's starting point,
``problem.init_params``: for a language model's LoRA subset the adapters with ``B = 0``
(the adapted model *is* the pretrained one), for a parameter-glob subset (the last
decoder layer) the pretrained values; for any other network, its initialisation.

The fit makes no pass over the data (``passes`` is 0), so it depends on neither the
temperature nor the prior: one fit per seed serves every temperature, as ``mle`` does.
Its ``update`` is never called by a fit; called directly it leaves θ₀ as it is and
reports the batch's loss (−mean log p(y|x,θ₀)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field

from bayesflow.methods.base import Method, MethodBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "BaseModelSpec", "BaseModelState", "build"]


class BaseModelSpec(MethodBase):
    """The base model without any fit (the pretrained weights of a language model)."""

    engine: Literal["base"] = Field(description="Registry name of the engine.")


def build(problem: Problem, tempering: Tempering, config: BaseModelSpec) -> Engine:
    """An engine that keeps its starting point: zero passes, a point-mass posterior there.

    Args:
        problem: the model, likelihood and data size (its prior is not read).
        tempering: unused: nothing is fitted, so no temperature enters.
        config: the method's spec (no settings of its own).
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior

    def init(params: Tensor, generator: torch.Generator) -> BaseModelState:
        return BaseModelState(params.detach().clone())

    def update(state: BaseModelState, batch: Batch) -> tuple[BaseModelState, dict[str, Tensor]]:
        with torch.no_grad():
            loss = -problem.log_posterior(state.params, batch, 0.0)
        return state, {"loss": loss}

    def posterior(state: BaseModelState) -> Posterior:
        return Posterior(mean=state.params, var=torch.zeros_like(state.params))

    return Engine(init, update, posterior, passes=0, batch_size=None)


class BaseModelState(NamedTuple):
    """The state of the base model: ``params`` θ₀ (d,), never changed."""

    params: Tensor


METHODS = (
    Method(
        "base", BaseModelSpec,
        Traits(shares_temperature="always", posterior="point", uses_prior=False),
        build, label="base model",
    ),
)
