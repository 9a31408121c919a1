"""What every SG-MCMC sampler shares: chains, step sizes, noise, collection.

The samplers (:mod:`bayesflow.methods.sgld`, ``sghmc``, ``sgnht``, ``baoa``) differ only in
their update rule. :func:`build_chains` binds the rest once, from the method's spec:

- **chains**: ``chains: K`` runs K chains as one (K, d) tensor, with no Python loop over
  chains; their gradients come from :func:`bayesflow.engines.gradient.chain_gradient`
  (one reverse pass over the sum of the chains' log posteriors when each chain has its own
  minibatch). Chain 0 starts from the parameters given to ``init``; chains 1…K−1 from
  fresh ``problem.init_params`` draws (so parallel chains start apart, as the members of
  a deep ensemble do; :mod:`bayesflow.methods.deep_ensemble` starts the same way).
- **independent chains** (``minibatches: independent``, the default): each chain has its
  own start, its own injected noise (the rows of each (K, d) draw) and its own minibatch
  order (``Engine.streams`` = K, so :func:`bayesflow.engines.fit.minibatches` draws K
  orders per epoch). Parallel SGHMC with ``keep: last`` is then K independent runs, an
  asymptotically Bayesian deep ensemble (Duffield et al., 2025,
  https://arxiv.org/abs/2406.00104). ``minibatches: shared`` feeds every chain the one
  order a single chain would see (``streams`` = 1); full batch draws no order at all.
- **compile** (``compile: true``): the gradient runs through ``torch.compile``; where it
  pays and where it does not: docs/benchmarks.md#compiled-gradients.
- **temperature**: every sampler targets ``exp(f/𝒯)`` with 𝒯 = T / N
  (:mod:`bayesflow.temperature`); momenta start from N(0, 𝒯 I) and the injected noise
  variance is proportional to 𝒯. At T = 0 there is no noise, momenta start at 0, and each
  sampler is its deterministic optimiser.
- **per-chain temperatures** (a vectorised grid, ``execution.vectorize``): built with a
  :class:`~bayesflow.temperature.ChainTempering`, the engine runs one chain per entry,
  chain k at its own T_k: 𝒯 is a (K, 1) tensor that broadcasts over the (K, d) state,
  and under the likelihood convention the prior weight c_k is vmapped with the chains.
  ``init`` may then be given the K starting points (K, d) directly, and each step's aux
  adds ``chain_loss`` (K,), the per-chain −f, so a caller can keep one loss trace per
  cell. With a plain :class:`~bayesflow.temperature.Tempering` nothing of this applies.
- **step sizes** (``schedule``): ``constant`` ε; ``decaying`` ε·(1 + t/τ)^(−γ), the
  polynomial decay of Welling & Teh (2011); ``cyclical``, the cosine cycles of cSG-MCMC
  (Zhang et al., 2020, https://arxiv.org/abs/1902.03932)::

      ε_t = ε/2 · (cos(π r_t) + 1),   r_t = (t mod ⌈S/M⌉) / ⌈S/M⌉

  over S update steps in M cycles; while ``r_t < exploration`` the step injects no noise
  and keeps no sample (the exploration stage).
- **collection**: after ``burn_in`` update steps every ``thin``-th state of every chain
  is kept (``keep: all``), or only each chain's final state (``keep: last``). The kept
  states are appended in place to the state's ``samples`` list (a new list per step would
  cost O(S²)), so a state's list is shared with the states after it. Chain k's samples
  are rows ``k·S … (k+1)·S − 1`` of the posterior, so chains ``k₀ … k₁`` are contiguous.
- **gradient noise** (SGHMC's ``gradient_noise: estimated``, docs/cold-chains.md):
  :func:`group_gradient` takes a minibatch's gradient as the mean of G groups' and their
  spread as an estimate of one example's gradient variance; :func:`independent_batch`
  draws the independent minibatches the correction needs; :func:`minibatch_variance`
  turns the one into the other.

**Seeds and streams.** Everything random comes from the one generator given to ``init``
(the fit stage's, seeded by the run's seed; a ``fit_group`` starts each cell's chains
from a generator seeded by the cell's seed and then draws from the group's), in this order:

1. ``init``: chains 1…K−1's starting points, ``problem.init_params(generator)`` each
   (with ``chains_per_start`` M: K/M − 1 draws, each start shared by M chains) (one
   integer from the generator reseeds torch's CPU generator, then the model's
   ``reset_parameters`` run in module order: see docs/design.md for the plain-torch
   recipe); then the initial momenta, one ``randn((K, d))`` (none at T = 0, none for SGLD);
2. each epoch: the minibatch order(s), before the epoch's first step (one ``randperm(N)``,
   or ``rand((K, N)).argsort(1)`` for K independent streams; nothing at full batch);
3. each update step: the injected noise, one ``randn((K, d))`` (none at T = 0 or while a
   cyclical schedule explores).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, ChainBatch, Engine, Posterior, Problem
from bayesflow.engines.gradient import Gradient, chain_gradient
from bayesflow.engines.optimize import steps_per_epoch
from bayesflow.errors import StageError
from bayesflow.methods.base import SamplerBase, SamplerScheduleSpec
from bayesflow.temperature import ChainTempering, Tempering

__all__ = [
    "Chains",
    "build_chains",
    "build_step_size",
    "chain_starts",
    "group_gradient",
    "independent_batch",
    "minibatch_variance",
    "step_aux",
]

StepSize = Callable[[int], tuple[float, bool]]


def standard_normal(
    shape: tuple[int, ...], like: Tensor, generator: torch.Generator, scratch: Tensor | None = None
) -> Tensor:
    """N(0, I) of ``shape`` and ``like``'s dtype from ``generator``, on ``like``'s device;
    drawn into ``scratch`` (a tensor the caller is done with) where that gives the same
    numbers: contiguous, of that shape and dtype, on the generator's device."""
    if (
        scratch is not None and tuple(scratch.shape) == shape and scratch.dtype == like.dtype
        and scratch.device == generator.device and scratch.is_contiguous()
    ):
        return scratch.normal_(generator=generator)
    noise = torch.randn(shape, generator=generator, dtype=like.dtype, device=generator.device)
    return noise.to(like.device)


def chain_starts(
    problem: Problem, params: Tensor, chains: int, generator: torch.Generator, per_start: int = 1
) -> Tensor:
    """K starting points (K, d): ``params`` first, then ``problem.init_params`` draws; with
    ``per_start`` M > 1, K/M points (K/M − 1 draws), each repeated for M consecutive chains."""
    starts = [params.detach()] + [
        problem.init_params(generator).to(params) for _ in range(chains // per_start - 1)
    ]
    return torch.stack(starts).repeat_interleave(per_start, dim=0)


def build_step_size(lr: float, spec: SamplerScheduleSpec, total_steps: int) -> StepSize:
    """``step -> (ε_t, exploring)`` for update steps counted from 0 (see the module doc)."""
    if spec.kind == "constant":
        return lambda step: (lr, False)
    if spec.kind == "decaying":
        return lambda step: (lr * (1 + step / spec.decay_steps) ** -spec.power, False)
    period = math.ceil(max(1, total_steps) / spec.cycles)

    def cyclical(step: int) -> tuple[float, bool]:
        position = (step % period) / period
        return 0.5 * lr * (math.cos(math.pi * position) + 1), position < spec.exploration

    return cyclical


@dataclass(frozen=True)
class Chains:
    """The shared parts of an SG-MCMC engine, bound to one problem and spec.

    Attributes:
        name: the engine's registry name, for messages.
        problem: the model, likelihood, prior and data size.
        config: the sampler's spec.
        per_datum: 𝒯 = T / N, the temperature of the per-datum log posterior: a float, or
            a (K, 1) tensor of one 𝒯 per chain.
        gradient: ``(params (K, d), batch) -> (∇f (K, d), f (K,))``, for a batch every
            chain shares or a ``ChainBatch`` of one per chain.
        step_size: ``step -> (ε_t, exploring)``.
        count: K, the number of chains.
        hot: whether any chain has T > 0 (else no noise is ever drawn).
    """

    name: str
    problem: Problem
    config: SamplerBase
    per_datum: float | Tensor
    gradient: Gradient
    step_size: StepSize
    count: int
    hot: bool

    @property
    def streams(self) -> int:
        """``Engine.streams``: K independent minibatch orders, or 1 when the chains share
        one (``minibatches: shared``, one chain, or full batch)."""
        config = self.config
        if config.minibatches == "shared" or config.batch_size is None:
            return 1
        return self.count

    def engine(self, init: Callable[..., Any], update: Callable[..., Any],
               posterior: Callable[[Any], Posterior]) -> Engine:
        """The sampler's :class:`~bayesflow.engines.base.Engine`: its functions, with the
        spec's epochs and batch size and the chains' minibatch streams."""
        return Engine(
            init, update, posterior, self.config.epochs, self.config.batch_size, self.streams
        )

    def start(self, params: Tensor, generator: torch.Generator) -> Tensor:
        """The K chains' starting points (K, d), a new tensor: from ``params`` (d,) as the
        module doc says, or a copy of ``params`` when it holds K starting points (K, d)."""
        if params.dim() == 1:
            per_start = getattr(self.config, "chains_per_start", 1)
            return chain_starts(self.problem, params, self.count, generator, per_start)
        expected = (self.count, self.problem.dimension)
        if tuple(params.shape) != expected:
            raise ValueError(
                f"{self.name}: starting points must be (d,) or one per chain {expected}, "
                f"got {tuple(params.shape)}"
            )
        return params.detach().clone()

    def momenta(self, like: Tensor, generator: torch.Generator) -> Tensor:
        """Initial momenta N(0, 𝒯 I) shaped like ``like``; zeros at T = 0 (no draw)."""
        drawn = self.noise(self.per_datum, False, like, generator)
        return torch.zeros_like(like) if isinstance(drawn, float) else drawn

    def noise(
        self, variance: float | Tensor, exploring: bool, like: Tensor,
        generator: torch.Generator, scratch: Tensor | None = None,
    ) -> Tensor | float:
        """``N(0, variance · I)`` shaped like ``like`` (``variance`` a float or (K, 1) per
        chain), drawn into ``scratch`` where :func:`standard_normal` can; 0 (no draw) at
        zero variance or while exploring."""
        if exploring or not self.hot:
            return 0.0
        shape = tuple(like.shape)
        if isinstance(variance, Tensor):
            return standard_normal(shape, like, generator, scratch).mul_(variance.clamp(min=0).sqrt())
        if variance <= 0:
            return 0.0
        return standard_normal(shape, like, generator, scratch).mul_(math.sqrt(variance))

    def add_noise(
        self, target: Tensor, variance: float | Tensor, exploring: bool,
        generator: torch.Generator, scratch: Tensor | None = None,
    ) -> None:
        """Add :meth:`noise` to ``target`` in place (the draw scaled inside the add)."""
        if exploring or not self.hot:
            return
        if isinstance(variance, Tensor):
            draw = standard_normal(tuple(target.shape), target, generator, scratch)
            target.addcmul_(draw, variance.clamp(min=0).sqrt())
        elif variance > 0:
            draw = standard_normal(tuple(target.shape), target, generator, scratch)
            target.add_(draw, alpha=math.sqrt(variance))

    def aux(self, log_posterior: Tensor) -> dict[str, Tensor]:
        """The aux of one step (:func:`step_aux`), plus ``chain_loss`` (K,) per chain when
        the chains have their own temperatures."""
        aux = step_aux(log_posterior)
        if isinstance(self.per_datum, Tensor):
            aux["chain_loss"] = -log_posterior.detach()
        return aux

    def collect(
        self, samples: list[Tensor], params: Tensor, step: int, exploring: bool, copy: bool = False
    ) -> None:
        """Append ``params`` (K, d), a copy with ``copy``, when step ``step`` (from 1) is kept."""
        config = self.config
        if config.keep != "all" or exploring or step <= config.burn_in:
            return
        if (step - config.burn_in) % config.thin == 0:
            samples.append(params.clone() if copy else params)

    def posterior(self, params: Tensor, samples: list[Tensor], steps: int) -> Posterior:
        """The kept samples, each chain's contiguous, or the chains' last states."""
        if self.config.keep == "last":
            return Posterior(samples=params)
        if not samples:
            raise StageError(
                f"{self.name} kept no samples: burn_in is {self.config.burn_in} but only "
                f"{steps} update steps ran (or all of them explored); lower burn_in or "
                "raise epochs"
            )
        # Stacked as (K, S, d), then flattened so that each chain's samples are contiguous.
        return Posterior(samples=torch.stack(samples, 1).reshape(-1, self.problem.dimension))


def build_chains(
    name: str, problem: Problem, tempering: Tempering | ChainTempering, config: SamplerBase
) -> Chains:
    """Bind the shared SG-MCMC machinery of engine ``name`` (see the module docstring)."""
    total_steps = config.epochs * steps_per_epoch(problem.num_data, config.batch_size)
    step_size = build_step_size(config.lr, config.schedule, total_steps)
    if isinstance(tempering, Tempering):
        return Chains(
            name,
            problem,
            config,
            tempering.per_datum,
            chain_gradient(problem, tempering.prior_weight, config.compile),
            step_size,
            count=config.chains,
            hot=tempering.per_datum > 0,
        )
    like = problem.prior_precision.new_empty(0, device=problem.device)
    per_datum = torch.tensor(tempering.per_datum).to(like).unsqueeze(-1)
    weights = tempering.prior_weight
    # One c for every chain unless the likelihood convention gives each its own T_k.
    prior_weight = weights[0] if len(set(weights)) == 1 else torch.tensor(weights).to(like)
    return Chains(
        name,
        problem,
        config,
        per_datum,
        chain_gradient(problem, prior_weight, config.compile),
        step_size,
        count=len(tempering.temperatures),
        hot=max(tempering.per_datum) > 0,
    )


def step_aux(log_posterior: Tensor) -> dict[str, Tensor]:
    """The aux of one step: ``loss`` = −f and ``log_posterior`` = f, averaged over chains."""
    value = log_posterior.mean().detach()
    return {"loss": -value, "log_posterior": value}


# ------------------------------------------------------------- gradient-noise estimate

GroupGradient = Callable[[Tensor, Batch], tuple[Tensor, Tensor, Tensor | None]]


def group_gradient(chains: Chains, groups: int) -> GroupGradient:
    """``(params (K, d), batch) -> (∇f (K, d), f (K,), s² (K, d) or None)``.

    The minibatch of every chain is cut into ``groups`` equal groups of consecutive
    examples (the batch is a random draw in random order, so these are random groups).
    Their gradients come from one call of the chains' gradient, the K·G groups standing
    as chains with a batch each (with one prior weight per chain, a vectorised grid under
    the likelihood convention, from G calls instead). Their mean is the minibatch
    gradient; their spread estimates the variance of one example's gradient,
    ``s² = (B/G) · var_j(∇f_j)`` (the prior term is the same in every group and cancels).
    On digits' MLP, one chain, batch 32, one thread: 0.9-1.1 ms against 1.6-2.3 ms for G
    calls and 0.7-1.1 ms for the plain gradient (measured on a busy 2-core machine).
    A batch of fewer than G examples, or one that G does not divide, is taken whole and
    gives no estimate (None).

    Args:
        chains: the sampler's shared parts (its gradient).
        groups: G, at least 2.
    """

    def gradient(params: Tensor, batch: Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        inputs, targets = batch
        own = isinstance(batch, ChainBatch)
        size = inputs.shape[1] if own else inputs.shape[0]
        if size < groups or size % groups:
            grads, values = chains.gradient(params, batch)
            return grads, values, None
        per = size // groups
        if isinstance(chains.per_datum, Tensor):  # per-chain weights: one call per group
            pieces = [
                chains.gradient(params, slice_batch(inputs, targets, own, start, per))
                for start in range(0, size, per)
            ]
            parts = [grad for grad, _ in pieces]
            values = torch.stack([value for _, value in pieces]).mean(0)
        else:  # the groups as G·K chains of a batch each: one call
            count, dimension = params.shape
            stacked = params.repeat_interleave(groups, dim=0)
            grads, group_values = chains.gradient(
                stacked, ChainBatch(split(inputs, own, count, groups), split(targets, own, count, groups))
            )
            parts = list(grads.view(count, groups, dimension).unbind(1))
            values = group_values.view(count, groups).mean(1)
        mean = sum(parts[1:], parts[0]) / groups
        # The sample variance over the groups, summed term by term: Tensor.var over a
        # short axis was measured at 0.7 ms for digits' MLP, half the step.
        squares = sum(((grad - mean) ** 2 for grad in parts[1:]), (parts[0] - mean) ** 2)
        return mean, values, squares * (per / (groups - 1))

    return gradient


def slice_batch(inputs: Tensor, targets: Tensor, own: bool, start: int, size: int) -> Batch:
    """Examples ``start … start + size − 1`` of a batch (of every chain's, for a ChainBatch)."""
    if own:
        return ChainBatch(inputs[:, start : start + size], targets[:, start : start + size])
    return inputs[start : start + size], targets[start : start + size]


def split(values: Tensor, own: bool, count: int, groups: int) -> Tensor:
    """(K, B, ...) per-chain or (B, ...) shared batch values as (K·G, B/G, ...): chain k's
    groups are rows k·G … k·G + G − 1."""
    if not own:
        values = values.unsqueeze(0).expand(count, *values.shape)
    return values.reshape(count * groups, values.shape[1] // groups, *values.shape[2:])


def minibatch_variance(spread: Tensor, batch: Batch) -> Tensor:
    """The variance s²/B of the mean gradient of B examples drawn independently (with
    replacement, as :func:`independent_batch` draws them), from the per-example
    variance ``s²``."""
    inputs = batch[0]
    size = inputs.shape[1] if isinstance(batch, ChainBatch) else inputs.shape[0]
    return spread / size


def independent_batch(
    inputs: Tensor, targets: Tensor, size: int, chains: Chains, generator: torch.Generator
) -> Batch:
    """B examples drawn uniformly with replacement from the whole data set: one
    ``randint`` of (B,) when the chains share a stream, of (K, B) for K independent
    chains (a :class:`~bayesflow.engines.base.ChainBatch`)."""
    count = inputs.shape[0]
    if chains.streams == 1:
        index = torch.randint(count, (size,), generator=generator, device=generator.device)
        index = index.to(inputs.device)
        return inputs.index_select(0, index), targets.index_select(0, index)
    index = torch.randint(count, (chains.count, size), generator=generator, device=generator.device)
    index = index.to(inputs.device).reshape(-1)
    return ChainBatch(
        inputs.index_select(0, index).view(chains.count, size, *inputs.shape[1:]),
        targets.index_select(0, index).view(chains.count, size, *targets.shape[1:]),
    )
