"""The K independent minibatch orders of :func:`bayesflow.engines.fit.chain_orders`.

Each chain's order is a permutation of the rows, chains get different orders and
batches, and the batches' statistics match those of independent uniform permutations.
The plain-torch recipe of docs/design.md ("Seeds and streams") gives the same orders.
"""

from __future__ import annotations

import math

import pytest
import torch

from bayesflow.engines.base import ChainBatch
from bayesflow.engines.fit import chain_orders, distinct_indices, minibatches

POINTS, BATCH, CHAINS = 96, 8, 200


def plain_torch_orders(count: int, chains: int, generator: torch.Generator) -> torch.Tensor:
    """docs/design.md's recipe for one epoch's K orders, without bayesflow."""
    outer, middle, inner = (torch.randperm(count, generator=generator) for _ in range(3))
    scales = torch.tensor([a for a in range(1, count + 1) if math.gcd(a, count) == 1])
    pairs = len(scales) * count
    maps = []
    for _ in range(2):
        picked = torch.randint(0, pairs, (chains,), generator=generator)
        while chains <= pairs:  # redraw every repeat after its first until all differ
            values, order = picked.sort(stable=True)
            repeats = order[1:][values[1:] == values[:-1]]
            if len(repeats) == 0:
                break
            picked[repeats] = torch.randint(0, pairs, (len(repeats),), generator=generator)
        maps.append((scales[picked // count, None], picked[:, None] % count))
    (a, b), (c, e) = maps
    return outer[(c * middle[(a * inner + b) % count] + e) % count]


@pytest.mark.parametrize("count", [1, 2, 12, 96, 768])
def test_every_order_is_a_permutation_and_the_recipe_gives_it(count: int) -> None:
    """Row k is a permutation of 0 … N−1, equal to the plain-torch recipe's row k."""
    orders = chain_orders(count, 7, torch.Generator().manual_seed(count)).full()
    assert orders.shape == (7, count) and orders.dtype == torch.int64
    assert torch.equal(orders.sort(1).values, torch.arange(count).expand(7, -1))
    recipe = plain_torch_orders(count, 7, torch.Generator().manual_seed(count))
    assert torch.equal(orders, recipe)


def test_large_data_uses_wide_integers_and_stays_a_permutation() -> None:
    """N = 50,000 (N² + N over int32) and K above the distinct-pair limit's reach."""
    count = 50_000
    orders = chain_orders(count, 3, torch.Generator().manual_seed(0))
    assert orders.scale.dtype == torch.int64
    full = orders.full()
    assert torch.equal(full.sort(1).values, torch.arange(count).expand(3, -1))
    assert len(set(map(tuple, full[:, :50].tolist()))) == 3


def test_affine_maps_are_distinct_while_there_are_enough() -> None:
    """The K maps of a layer are distinct when K ≤ M (here all M of them: a permutation),
    and drawn with repeats when K > M."""
    generator = torch.Generator().manual_seed(0)
    every = distinct_indices(40, 40, generator)
    assert torch.equal(every.sort().values, torch.arange(40))
    more = distinct_indices(40, 100, generator)
    assert more.shape == (100,) and int(more.min()) >= 0 and int(more.max()) < 40
    # N = 2: φ(2) = 1, two maps (shifts 0 and 1), so at most two distinct orders.
    orders = chain_orders(2, 5, generator).full()
    assert torch.equal(orders.sort(1).values, torch.arange(2).expand(5, -1))


def test_each_chain_sees_every_row_once_per_epoch_in_its_own_order() -> None:
    """Through ``minibatches``: per epoch every chain's batches partition the rows, no two
    chains have the same order, and the next epoch draws new orders."""
    inputs = torch.arange(POINTS).unsqueeze(-1)
    generator = torch.Generator().manual_seed(3)
    epochs = [list(minibatches(inputs, inputs.squeeze(-1), BATCH, generator, CHAINS))
              for _ in range(2)]
    seen = []
    for batches in epochs:
        assert all(isinstance(batch, ChainBatch) for batch in batches)
        assert all(torch.equal(batch.inputs.squeeze(-1), batch.targets) for batch in batches)
        order = torch.cat([batch.targets for batch in batches], 1)
        assert torch.equal(order.sort(1).values, torch.arange(POINTS).expand(CHAINS, -1))
        assert len({tuple(row.tolist()) for row in order}) == CHAINS
        seen.append(order)
    assert not (seen[0] == seen[1]).all(1).any()


def test_batches_overlap_between_chains_as_independent_permutations_would() -> None:
    """At one step two independent uniform orders share B²/N rows on average
    (hypergeometric); the K chains' batches do too, few pairs share a whole batch, and each
    row is equally likely at every position and in a chain's first batch."""
    generator = torch.Generator().manual_seed(11)
    overlaps, identical, first_rows = [], 0, []
    for _ in range(4):
        order = chain_orders(POINTS, CHAINS, generator).full()
        first_rows.append(order[:, 0])
        for start in range(0, POINTS, BATCH):
            members = torch.zeros(CHAINS, POINTS)
            members.scatter_(1, order[:, start : start + BATCH], 1.0)
            shared = members @ members.T  # (K, K) rows two chains' batches share
            upper = shared[torch.triu_indices(CHAINS, CHAINS, 1).unbind()]
            overlaps.append(upper)
            identical += int((upper == BATCH).sum())
    overlap = torch.cat(overlaps)
    expected = BATCH * BATCH / POINTS
    # The pair means over 4 epochs × 12 steps × 19,900 pairs: standard error about 0.01.
    assert abs(float(overlap.mean()) - expected) < 0.05
    # The hypergeometric variance B²/N · (1 − B/N) · (N − B)/(N − 1) ≈ 0.566; one affine
    # layer instead of two measured 0.64-0.66 here.
    variance = expected * (1 - BATCH / POINTS) * (POINTS - BATCH) / (POINTS - 1)
    assert abs(float(overlap.var()) - variance) < 0.03
    assert identical <= 5  # independent orders: about 1e-11 of the 955,200 pair-steps
    counts = torch.bincount(torch.cat(first_rows), minlength=POINTS).double()
    chi_square = float(((counts - counts.mean()) ** 2 / counts.mean()).sum())
    assert chi_square < 160  # 95 degrees of freedom: P(χ² > 160) < 1e-4


def test_one_stream_is_still_one_randperm() -> None:
    """``streams == 1`` (shared mode) keeps drawing one ``randperm(N)`` per epoch."""
    inputs = torch.arange(POINTS).unsqueeze(-1)
    batches = list(minibatches(inputs, inputs.squeeze(-1), BATCH,
                               torch.Generator().manual_seed(5)))
    order = torch.randperm(POINTS, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.cat([targets for _, targets in batches]), order)
