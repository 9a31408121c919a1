"""Layer-wise preconditioned symplectic-Euler Langevin dynamics (``sgmcmc_wenzel``).

The SG-MCMC sampler of the cold posterior paper (Wenzel et al., 2020, "How good is the
Bayes posterior in deep neural networks really?", https://arxiv.org/abs/2002.02405:
Algorithm 1 with the preconditioning of its appendix and code), on the per-datum log
posterior f of :mod:`bayesflow.temperature`, with step size ε, friction α and a diagonal
mass M::

    m ← (1 − εα) m + ε ∇f(θ) + N(0, 2εα 𝒯 M)
    θ ← θ + ε M⁻¹ m

(symplectic Euler: the momentum first, then θ with the *new* m). For any fixed positive
M the stationary distribution is ``exp(f(θ)/𝒯 − mᵀM⁻¹m/(2𝒯))``, so θ targets the
tempered posterior ``exp(f/𝒯)`` with 𝒯 = T / N; the prior weight inside f follows the
convention. These are the paper's dynamics with time and momenta rescaled by √N
(its h = ε/√N, its momenta √N m): its learning rate ℓ is ε² and its momentum decay is
1 − εα (ℓ = 0.1 and decay 0.9 there are ε ≈ 0.32, α ≈ 0.32 here). M starts at I and
the momenta at N(0, 𝒯 I). At T = 0 there is no noise and the update is preconditioned
heavy-ball gradient ascent on f.

**M, layer by layer** (``preconditioner: layerwise``). M holds one scalar per parameter
tensor (a layer's weight or bias), from a running mean over that tensor of the squared
minibatch gradient g = ∇f, as the paper's code estimates it (raw second moment, scaled
so that the least sensitive tensor has mass 1)::

    v_l ← ρ v_l + (1 − ρ) mean_{i ∈ l} gᵢ²        (v_l = mean gᵢ² at the first step)
    M_l = √(v_l + λ) / min_k √(v_k + λ),  λ = 1e-7

Tensors with large gradients get a large mass and move more slowly; no tensor moves
faster than it would with M = I, so a step size that is stable without the
preconditioner stays stable. M is refreshed from v at every burn-in step and, with
``mass_updates: cycle_starts``, at the first step of the run and of every cycle of the
cyclical schedule (where the step size rises back to ε). Between refreshes, and so
while samples are collected, M is fixed and each stretch is an ordinary sampler of the
target; at a refresh the momenta are rescaled by √(M_new/M_old), which keeps mᵀM⁻¹m.
The chain barely moves in a cycle's last, tiny steps, so a burn-in of whole cycles lets
it forget its start.
``preconditioner: none`` keeps M = I: the update is then SGHMC in symplectic-Euler
order. The step sizes are those of :mod:`bayesflow.engines.sgmcmc`, as are chains,
burn-in, thinning and keep; the paper samples with the cosine cycles of Zhang et al.
(2020), ``schedule: {kind: cyclical}``.

**Kinetic temperature under M** (the paper's Section 4): T̂ = (1/d) Σᵢ mᵢ²/Mᵢ estimates
𝒯. The state holds ``momenta`` and ``mass`` (K, d) so that diagnostics divide by M, and
each step's aux adds ``kinetic_temperature`` = N·T̂, in units of T. With the paper's
noise 2εα𝒯M, symplectic Euler's momenta are slightly hot, T̂ ≈ 𝒯/(1 − εα/2) (the
friction step alone holds them at 2εα𝒯M / (1 − (1 − εα)²)), while the samples' variance
is off by O(ε²) only; at the paper's momentum decay 0.9 that is 5% on T̂.

The name: this is one recipe (integrator, layer-wise mass, cyclical schedule and its
temperature check) known by its paper, not one algorithm with an acronym; "preconditioned
SGLD/SGHMC" would suggest the per-parameter RMSprop preconditioner of Li et al. (2016),
which adapts at every step and needs a correction term that this sampler does not.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import Field, model_validator

from bayesflow.methods.base import Method, SamplerBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import ChainTempering, Tempering

__all__ = ["METHODS", "SGMCMCWenzelSpec", "SGMCMCWenzelState", "build"]

# λ of M_l = √(v_l + λ): DEFAULT_PRECOND_REGULARIZATION of the paper's code
# (google-research/cold_posterior_bnn, core/sgmcmc.py), in the same per-datum gradient units.
REGULARIZATION = 1e-7


class SGMCMCWenzelSpec(SamplerBase):
    """Symplectic-Euler Langevin dynamics with a layer-wise mass (Wenzel et al., 2020)."""

    engine: Literal["sgmcmc_wenzel"] = Field(description="Registry name of the engine.")
    alpha: float = Field(
        1.0,
        ge=0,
        description="Friction α; the momentum decays by 1 − εα per step (the momentum decay "
        "of Wenzel et al., 2020, Algorithm 1, is 1 − εα at their learning rate ℓ = ε²).",
    )
    preconditioner: Literal["layerwise", "none"] = Field(
        "layerwise",
        description="`layerwise`: a diagonal mass M with one scalar per parameter tensor, "
        "from the running mean square of its gradient (Wenzel et al., 2020, Appendix); "
        "`none`: M = I.",
    )
    preconditioner_decay: float = Field(
        0.99,
        ge=0,
        lt=1,
        description="ρ of the running mean square v ← ρ v + (1 − ρ) mean g² per tensor "
        "(0.99 in the code of Wenzel et al., 2020).",
    )
    mass_updates: Literal["burn_in", "cycle_starts"] = Field(
        "cycle_starts",
        description="When M is re-estimated from the running mean square: at every burn-in "
        "step (`burn_in`), and also at the first step and at the start of every cycle of "
        "a cyclical schedule (`cycle_starts`). It is fixed in between, so each stretch of "
        "collected samples comes from one valid sampler.",
    )

    @model_validator(mode="after")
    def _checks(self) -> SGMCMCWenzelSpec:
        if self.lr * self.alpha > 1:
            raise ValueError(
                f"the momentum decay 1 − lr·alpha is negative (lr={self.lr}, "
                f"alpha={self.alpha}); use lr·alpha <= 1"
            )
        if self.preconditioner == "layerwise" and self.mass_updates == "burn_in" and not self.burn_in:
            raise ValueError(
                "mass_updates: burn_in with burn_in 0 never estimates the mass; set "
                "burn_in > 0, use mass_updates: cycle_starts, or preconditioner: none"
            )
        return self


def build(
    problem: Problem, tempering: Tempering | ChainTempering, config: SGMCMCWenzelSpec
) -> Engine:
    """The sampler targeting ``exp(f/𝒯)``; see the module docstring for the update rule.

    Args:
        problem: the model, likelihood, prior and data size; its parameter tensors are
            the layers of the mass.
        tempering: 𝒯 = T / N scales the momenta and the noise; the convention sets the
            prior weight. A ``ChainTempering`` gives every chain its own T (a vectorised
            grid); every chain has its own mass.
        config: the method's spec (step size and schedule, friction, preconditioner,
            chains, burn-in, thinning, keep).
    """
    import torch

    from bayesflow.engines.sgmcmc import build_chains

    chains = build_chains("sgmcmc_wenzel", problem, tempering, config)
    friction, decay = config.alpha, config.preconditioner_decay
    # The last update step that may refresh M (v is not tracked after it): the last
    # burn-in step or the first step, or none while cycles keep starting.
    cycles = config.mass_updates == "cycle_starts" and config.schedule.kind == "cyclical"
    last_refresh = math.inf if cycles else max(config.burn_in - 1, 0)
    sizes = [math.prod(shape) for shape in problem.param_shapes]
    layer_of = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    layer_of = layer_of.to(problem.device)

    def init(params: Tensor, generator: torch.Generator) -> SGMCMCWenzelState:
        starts = chains.start(params, generator)
        momenta = chains.momenta(starts, generator)
        second_moment = starts.new_zeros(starts.shape[0], len(sizes))
        return SGMCMCWenzelState(
            starts, momenta, torch.ones_like(starts), second_moment, generator, 0, []
        )

    def update(
        state: SGMCMCWenzelState, batch: Batch
    ) -> tuple[SGMCMCWenzelState, dict[str, Tensor]]:
        step_size, exploring = chains.step_size(state.step)
        grads, values = chains.gradient(state.params, batch)
        second_moment, mass, momenta = precondition(state, grads)
        variance = 2 * step_size * friction * chains.per_datum * mass
        momenta = (1 - step_size * friction) * momenta + step_size * grads
        momenta = momenta + chains.noise(variance, exploring, momenta, state.generator)
        params = state.params + step_size * momenta / mass
        step = state.step + 1
        chains.collect(state.samples, params, step, exploring)
        kinetic = (momenta**2 / mass).mean().detach() * problem.num_data
        new_state = SGMCMCWenzelState(
            params, momenta, mass, second_moment, state.generator, step, state.samples
        )
        return new_state, {**chains.aux(values), "kinetic_temperature": kinetic}

    def precondition(state: SGMCMCWenzelState, grads: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """v after this step's gradient, and M and m, refreshed when the step says so."""
        if config.preconditioner == "none" or state.step > last_refresh:
            return state.second_moment, state.mass, state.momenta
        squares = torch.stack([piece.mean(-1) for piece in (grads**2).split(sizes, -1)], -1)
        second_moment = squares if state.step == 0 else state.second_moment.lerp(squares, 1 - decay)
        if not refreshes(state.step):
            return second_moment, state.mass, state.momenta
        root = (second_moment + REGULARIZATION).sqrt()
        mass = (root / root.min(-1, keepdim=True).values)[:, layer_of]
        return second_moment, mass, state.momenta * (mass / state.mass).sqrt()

    def refreshes(step: int) -> bool:
        """Whether M is re-estimated at update step ``step`` (counted from 0)."""
        if step < config.burn_in:
            return True
        if config.mass_updates != "cycle_starts":
            return False
        return step == 0 or chains.step_size(step)[0] > chains.step_size(step - 1)[0]

    def posterior(state: SGMCMCWenzelState) -> Posterior:
        return chains.posterior(state.params, state.samples, state.step)

    return chains.engine(init, update, posterior)


class SGMCMCWenzelState(NamedTuple):
    """The state of K chains.

    Attributes:
        params: θ of every chain (K, d).
        momenta: m of every chain (K, d); at stationarity m ~ N(0, 𝒯 M), so their
            kinetic temperature ``mean(m²/M)·N`` estimates T.
        mass: M of every chain (K, d), constant over each parameter tensor.
        second_moment: v of every chain (K, P), the running mean square of the gradient
            over each of the P parameter tensors (zeros with ``preconditioner: none``).
        generator: the source of the initial momenta and the injected noise.
        step: update steps taken.
        samples: the kept states (K, d) in order (shared in place with later states).
    """

    params: Tensor
    momenta: Tensor
    mass: Tensor
    second_moment: Tensor
    generator: torch.Generator
    step: int
    samples: list[Tensor]


METHODS = (
    Method(
        "sgmcmc_wenzel", SGMCMCWenzelSpec,
        Traits(
            vectorizes=frozenset({"chains", "temperatures", "seeds"}),
            diagnostics=frozenset({"kinetic_temperature", "configurational_temperature", "convergence"}),
        ),
        build,
    ),
)
