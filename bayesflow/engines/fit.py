"""Drive an engine over shuffled minibatches and watch for divergence.

:func:`fit` is the one loop every engine shares: ``engine.passes`` epochs, each a
shuffled pass over the training data in minibatches of ``engine.batch_size``. It reads
the loss back once per epoch (not once per step, which would synchronise an accelerator
every step) and, after every epoch, checks that the loss and the state are finite.

**Minibatch streams.** At the start of each epoch :func:`minibatches` draws the epoch's
order from the fit's generator, before the epoch's first update:

- ``engine.streams == 1``: one order, ``torch.randperm(N, generator=generator)``, and
  every chain of the state sees the same batches ``order[s : s + B]``;
- ``engine.streams == K``: K orders at once (:func:`chain_orders`), and chain k's
  batches are rows ``s … s + B − 1`` of its order, handed to ``update`` together as one
  :class:`~bayesflow.engines.base.ChainBatch` (K, B, ...) so the K chains stay one
  vectorised program. Chain k sees every training point once per epoch, in its own order:
  the epoch's shared random permutations composed with two random affine bijections
  ``x ↦ a·x + b (mod N)`` of the chain's own (``a`` coprime with N; see
  :class:`ChainOrders`). Drawing them costs O(N + K) and each step computes only its
  (K, B) index. The earlier stream, one sort of
  K·N random keys per epoch (``rand((K, N)).argsort(1)``), took 0.49 s an epoch at
  K = 10,000 on Pima (one CPU thread, load 0.2), more than the epoch's 24 update steps;
  this one takes 0.05-0.11 s an epoch there, gathering each step's (K, B) rows included.

Full batch (``batch_size`` null, or at least N) draws nothing and every chain sees all
the data. docs/design.md ("Seeds and streams") states the whole order of the draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

from bayesflow.engines.base import Batch, ChainBatch, Engine, Posterior
from bayesflow.errors import DivergenceError

__all__ = ["ChainOrders", "FitResult", "chain_orders", "distinct_indices", "fit", "minibatches"]

# State fields not walked by the per-epoch check: the samplers' kept draws are copies of
# earlier parameters, which were checked when they were current (a NaN in θ stays NaN),
# and re-reading all of them every epoch would cost O(samples · d) each time (NUTS's
# draws are checked once, in the posterior, after the fit).
UNCHECKED_FIELDS = frozenset({"samples"})


class FitResult(NamedTuple):
    """What a fit returns.

    Attributes:
        state: the engine's final state.
        posterior: ``engine.posterior(state)``.
        history: the mean of ``aux["loss"]`` over each epoch's steps, one float per epoch.
        steps: the number of update steps taken.
    """

    state: Any
    posterior: Posterior
    history: list[float]
    steps: int


class ChainOrders(NamedTuple):
    """K minibatch orders of one epoch: three shared permutations and two affine maps per
    chain.

    Chain k's i-th training row of the epoch is ``outer[g_k(middle[f_k(inner[i])])]``
    with ``f_k(x) = (a_k·x + b_k) mod N`` and ``g_k(x) = (c_k·x + e_k) mod N``; ``a_k`` and
    ``c_k`` are coprime with N, so both maps are bijections of {0, …, N−1} and every order
    is a permutation. Marginally each chain's order is a uniformly random permutation
    (``outer`` is one). One affine layer alone gave overlaps between two chains' batches
    a variance 13-17% above that of independent orders (N = 96, B = 8, measured); two
    layers match it (0.566 against 0.566). Drawing the K orders costs O(N + K) instead
    of the O(K·N log N) of sorting K·N random keys, and each step computes only its
    (K, B) slice.

    Attributes:
        outer, middle, inner: (N,) the epoch's three shared random permutations.
        scale, shift: (2, K): row 0 holds every chain's a and b, row 1 its c and e.
    """

    outer: Tensor
    middle: Tensor
    inner: Tensor
    scale: Tensor
    shift: Tensor

    def inside(self, start: int, stop: int) -> Tensor:
        """Positions ``start … stop − 1`` of every chain's order before ``outer``: a
        (K, stop − start) index into the rows permuted by ``outer``."""
        count = self.outer.shape[0]
        scale, shift = self.scale.unsqueeze(-1), self.shift.unsqueeze(-1)
        mapped = (scale[0] * self.inner[start:stop] + shift[0]).remainder_(count)
        mapped = self.middle.index_select(0, mapped.reshape(-1)).view(mapped.shape)
        return (scale[1] * mapped + shift[1]).remainder_(count)

    def slice(self, start: int, stop: int) -> Tensor:
        """Positions ``start … stop − 1`` of every chain's order: a (K, stop − start) index."""
        inside = self.inside(start, stop)
        return self.outer.index_select(0, inside.reshape(-1)).view(inside.shape)

    def full(self) -> Tensor:
        """Every chain's whole order (K, N), row k chain k's (for tests and replays)."""
        return self.slice(0, self.outer.shape[0])


def units(count: int) -> Tensor:
    """The integers in 1 … N that are coprime with N (the invertible scales mod N)."""
    candidates = torch.arange(1, count + 1)
    return candidates[torch.gcd(candidates, torch.tensor(count)) == 1]


def chain_orders(count: int, streams: int, generator: torch.Generator) -> ChainOrders:
    """Draw one epoch's K = ``streams`` independent orders of ``count`` rows.

    The draws, in this order: ``outer``, ``middle`` and ``inner``, each ``randperm(N)``;
    then for each of the two layers, K indices into the M = N·φ(N) (scale, shift) pairs
    (:func:`distinct_indices`). Pair p is ``scale = units(N)[p // N]``, ``shift = p % N``.
    """
    device = generator.device
    outer, middle, inner = (
        torch.randperm(count, generator=generator, device=device) for _ in range(3)
    )
    scales = units(count).to(device)
    pairs = scales.shape[0] * count
    picked = torch.stack([distinct_indices(pairs, streams, generator) for _ in range(2)])
    # scale · x + shift < N² + N: in int32 while that fits (4x faster modulo on a CPU).
    dtype = torch.int32 if count * (count + 1) < 2**31 else torch.int64
    return ChainOrders(
        outer,
        middle.to(dtype),
        inner.to(dtype),
        scales[picked // count].to(dtype),
        (picked % count).to(dtype),
    )


def distinct_indices(total: int, count: int, generator: torch.Generator) -> Tensor:
    """``count`` indices in 0 … total − 1, distinct while ``count`` ≤ ``total``.

    ``randint(total, (count,))``, then, while two are equal, every repeat after the first
    (in position order) is drawn again with one ``randint`` for all of them. (A
    ``randperm(total)`` would cost O(total): 6 ms an epoch per layer on the digits, where
    M = 402,304.) With more indices than values, one ``randint`` draw, repeats kept.
    """
    device = generator.device
    picked = torch.randint(0, total, (count,), generator=generator, device=device)
    if count > total:
        return picked
    while True:
        values, order = picked.sort(stable=True)
        repeats = order[1:][values[1:] == values[:-1]]
        if repeats.numel() == 0:
            return picked
        picked[repeats] = torch.randint(
            0, total, (repeats.numel(),), generator=generator, device=device
        )


def minibatches(
    inputs: Tensor,
    targets: Tensor,
    batch_size: int | None,
    generator: torch.Generator,
    streams: int = 1,
) -> Iterator[Batch]:
    """One shuffled pass over the data; ``None`` (or a size ≥ n) gives one full batch.

    Args:
        inputs, targets: the data (n, ...), (n, ...).
        batch_size: the minibatch size; the last batch of a pass may be short.
        generator: the source of the order, drawn when the first batch is taken.
        streams: 1 for one order shared by every chain; K for K independent orders
            (:func:`chain_orders`), whose batches come as one
            :class:`~bayesflow.engines.base.ChainBatch` (K, B, ...).
    """
    count = inputs.shape[0]
    if batch_size is None or batch_size >= count:
        yield inputs, targets
        return
    if streams == 1:
        order = torch.randperm(count, generator=generator, device=generator.device)
        order = order.to(inputs.device)
        for start in range(0, count, batch_size):
            index = order[start : start + batch_size]
            yield inputs.index_select(0, index), targets.index_select(0, index)
        return
    orders = chain_orders(count, streams, generator)
    orders = ChainOrders(*(part.to(inputs.device) for part in orders))
    # The rows permuted by ``outer`` once per epoch: each step then gathers by
    # ``orders.inside`` (one (K, B) index_select fewer a step).
    inputs, targets = inputs.index_select(0, orders.outer), targets.index_select(0, orders.outer)
    for start in range(0, count, batch_size):
        index = orders.inside(start, min(start + batch_size, count))
        yield ChainBatch(rows(inputs, index), rows(targets, index))


def rows(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` for a (K, B) index: (K, B, ...), by one ``index_select`` on
    contiguous ``values`` (measured at K = 10,000, B = 32 on Pima: 40 against 155 ms per
    epoch for the inputs by advanced indexing, 15 against 70 ms for the targets)."""
    picked = values.index_select(0, index.reshape(-1))
    return picked.view(*index.shape, *values.shape[1:])


def fit(
    engine: Engine,
    params: Tensor,
    train_inputs: Tensor,
    train_targets: Tensor,
    generator: torch.Generator,
    on_epoch: Callable[[int, float], None] | None = None,
    on_state: Callable[[int, Any], None] | None = None,
) -> FitResult:
    """Run ``engine`` from ``params`` for ``engine.passes`` epochs.

    Args:
        engine: the built engine.
        params: the starting parameters (d,).
        train_inputs, train_targets: the training data (n, ...), (n,).
        generator: seeds the engine and the shuffling (``engine.streams`` orders per
            epoch, see the module docstring); the same seed gives the same fit.
        on_epoch: called as ``on_epoch(epoch, loss)`` after each epoch (epochs count from 1).
        on_state: called as ``on_state(epoch, state)`` after each epoch, for diagnostics
            that read the state (e.g. the kinetic temperature of the momenta).

    Raises:
        DivergenceError: when the loss, the state or the posterior is NaN or infinite.
    """
    if train_inputs.shape[0] == 0:
        raise ValueError("fit needs at least one training example, got 0")
    state = engine.init(params, generator)
    history: list[float] = []
    steps = 0
    for epoch in range(1, engine.passes + 1):
        first_step, losses = steps + 1, []
        batches = minibatches(
            train_inputs, train_targets, engine.batch_size, generator, engine.streams
        )
        for batch in batches:
            state, aux = engine.update(state, batch)
            steps += 1
            if "loss" in aux:
                losses.append(aux["loss"])
        loss = float(torch.stack(losses).mean()) if losses else math.nan
        check_finite(epoch, first_step, steps, state, loss if losses else None)
        history.append(loss)
        if on_epoch is not None:
            on_epoch(epoch, loss)
        if on_state is not None:
            on_state(epoch, state)
    posterior = engine.posterior(state)
    check_finite(engine.passes, 1, steps, posterior, what="posterior")
    return FitResult(state, posterior, history, steps)


def check_finite(
    epoch: int,
    first_step: int,
    last_step: int,
    state: Any,
    loss: float | None = None,
    what: str = "state",
) -> None:
    """Raise :class:`DivergenceError` when ``loss`` or a tensor of ``state`` is not finite."""
    tensors = dict(floating_tensors(state, what))
    if tensors:
        finite = torch.stack([torch.isfinite(value).all() for value in tensors.values()])
        all_finite = bool(finite.all())
    else:
        all_finite = True
    loss_finite = loss is None or math.isfinite(loss)
    if loss_finite and all_finite:
        return
    bad = [name for name, value in tensors.items() if not bool(torch.isfinite(value).all())]
    found = f"loss {loss}" if not loss_finite else f"non-finite values in {', '.join(bad)}"
    raise DivergenceError(
        f"the fit diverged in epoch {epoch} (update steps {first_step}-{last_step}): {found}. "
        "Try a smaller learning rate (lr)."
    )


def floating_tensors(value: Any, name: str) -> Iterator[tuple[str, Tensor]]:
    """The floating-point tensors inside nested tuples, lists, dicts and dataclasses."""
    if isinstance(value, Tensor):
        if value.is_floating_point() or value.is_complex():
            yield name, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for field, item in zip(value._fields, value):
            if field not in UNCHECKED_FIELDS:
                yield from floating_tensors(item, f"{name}.{field}")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from floating_tensors(item, f"{name}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from floating_tensors(item, f"{name}.{key}")
    elif hasattr(value, "__dataclass_fields__"):
        for field in value.__dataclass_fields__:
            yield from floating_tensors(getattr(value, field), f"{name}.{field}")
