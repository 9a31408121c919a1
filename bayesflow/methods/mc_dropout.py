"""MC dropout on LoRA adapters (``mc_dropout``): a MAP fit with the adapters' dropout on, and K
stochastic passes with it still on at prediction.

MC dropout (Gal & Ghahramani, 2016, https://arxiv.org/abs/1506.02142) reads a network
trained with dropout as a variational posterior and predicts with the dropout left on,
averaging the predictive probabilities of K stochastic forward passes::

    p̄(y|x) = (1/K) Σ_k p(y | x, θ̂, m_k),    m_k ~ Bernoulli(1 − p) masks, scaled by 1/(1 − p)

The Bayesian-LoRA papers (Laplace-LoRA, Yang et al., 2024; BLoB, Wang et al., 2024) use it
as a baseline on the adapters: peft's ``lora_dropout`` p on each adapter's input
(``model.trainable.lora.dropout``), the adapters fitted by AdamW with it on, K = 10 passes
at prediction. Here the fit is exactly ``map``'s (:mod:`bayesflow.methods.optimize`: the
same torchopt step on ``−f(θ) = −mean log p(y|x,θ) − c · log p(θ) / N``), each step's
forward under fresh masks: every update draws one integer seed from the fit's generator
and runs inside :func:`bayesflow.llm.dropout.dropout_on` (dropout on, torch's generator
seeded in a forked random state, both restored after). One seed, one fit.

Temperature: none. As for ``map`` the temperature enters only through the prior weight c,
so one fit serves every temperature under the posterior convention
(``shares_temperature: posterior``).

The posterior: ``Posterior(samples=(K, d))``, K = ``passes`` copies of the fitted θ̂; the
members differ by their masks, not their parameters, and the evaluate stage takes its
``evaluate.n_samples`` of them (at most K). Every prediction (the evaluate stage,
``load_posterior(...).predict``, the statement and text scores) runs the members with the
dropout on, seeded by its draw's seed (``traits.dropout``,
:func:`bayesflow.llm.dropout.stochastic_passes`): same seed, same numbers.

How the randomness runs under ``vmap``: the members go through the model as every method's
do, vmapped over the members, with ``randomness="different"`` so that each member draws its
own masks from torch's generator (one batched draw per chunk of members). Chosen over a
per-member loop because it keeps the one vectorised pass (K members cost one batched
forward, as K samples of any other method do), and because the masks are torch's own
dropout's, bit for bit the masks peft's modules draw in train mode, not a reimplementation.
The price: member k's masks depend on the chunk it is drawn in (the chunk sizes are fixed,
but the token predictive's windows per chunk follow the memory budget), so the numbers
repeat for one seed on one machine, not across budgets. The fit needs none of this: its
one member runs unvmapped.

A model with no adapter dropout (``dropout: 0``, a ``parameters:`` subset, a model that is
not a ``causal_lm``) would make every pass the MAP's: ``validate`` refuses it
(:func:`bayesflow.spec.llm_checks.dropout_problems`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field, PositiveInt

from bayesflow.methods.base import Method, MethodBase, OptimizerSpec, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Problem
    from bayesflow.methods.optimize import OptimizeState
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "MCDropoutSpec", "MCDropoutState", "build"]

# The seed each step draws for its masks (torch.manual_seed takes < 2⁶³).
SEED_BOUND = 2**62


def _adamw() -> OptimizerSpec:
    return OptimizerSpec(name="adamw", lr=1e-3)


class MCDropoutSpec(MethodBase):
    """MC dropout on LoRA adapters (Gal & Ghahramani, 2016): MAP with dropout on, K stochastic passes."""

    engine: Literal["mc_dropout"] = Field(description="Registry name of the engine.")
    optimizer: OptimizerSpec = Field(
        default_factory=_adamw,
        description="Optimiser of the fit (default AdamW, as the Bayesian-LoRA papers' baseline).",
    )
    epochs: PositiveInt = Field(100, description="Passes over the training data.")
    batch_size: PositiveInt | None = Field(128, description="Minibatch size; null for full batch.")
    passes: PositiveInt = Field(
        10, description="K, the stochastic passes (dropout masks) kept as the posterior's members "
        "(BLoB's final evaluation uses 10); the evaluate stage takes its `n_samples` of them."
    )


def build(problem: Problem, tempering: Tempering, config: MCDropoutSpec) -> Engine:
    """``map``'s step on ``−f(θ)`` with the adapters' dropout on, each step its own masks.

    Args:
        problem: a language model's problem (its ``module`` holds the adapter dropout).
        tempering: the convention and temperature, which set the prior weight c.
        config: the method's spec.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.llm.dropout import dropout_on
    from bayesflow.methods.optimize import OptimizeSpec
    from bayesflow.methods.optimize import build as build_optimizer

    inner = build_optimizer(
        problem, tempering.prior_weight,
        OptimizeSpec(engine="map", optimizer=config.optimizer, epochs=config.epochs, batch_size=config.batch_size),
    )

    def init(params: Tensor, generator: torch.Generator) -> MCDropoutState:
        return MCDropoutState(inner.init(params, generator), generator)

    def update(state: MCDropoutState, batch: Batch) -> tuple[MCDropoutState, dict[str, Tensor]]:
        generator = state.generator
        seed = int(torch.randint(0, SEED_BOUND, (1,), generator=generator, device=generator.device))
        with dropout_on(problem.module, seed):
            fitted, aux = inner.update(state.fit, batch)
        return MCDropoutState(fitted, generator), aux

    def posterior(state: MCDropoutState) -> Posterior:
        params = state.fit.params
        return Posterior(samples=params.detach().unsqueeze(0).expand(config.passes, -1).clone())

    return Engine(init, update, posterior, config.epochs, config.batch_size)


class MCDropoutState(NamedTuple):
    """The state of an MC dropout fit.

    Attributes:
        fit: ``map``'s state (:class:`~bayesflow.methods.optimize.OptimizeState`: θ, the
            optimiser's moments, the step count).
        generator: the source of each step's mask seed.
    """

    fit: OptimizeState
    generator: torch.Generator

    @property
    def params(self) -> Tensor:
        """θ (d,), the fitted adapters."""
        return self.fit.params

    @property
    def step(self) -> int:
        """Update steps taken."""
        return self.fit.step


METHODS = (
    Method(
        "mc_dropout", MCDropoutSpec,
        Traits(shares_temperature="posterior", dropout=True),
        build, label="MC dropout",
    ),
)
