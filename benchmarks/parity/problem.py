"""The peer-parity benchmark's problem and its per-seed draws, seen by both libraries.

One problem (the posteriors library's IMDB example setup, moved to scikit-learn's digits):

- data: bayesflow's ``sklearn_digits`` dataset (``test_fraction`` 0.5, ``split_seed`` 0),
  loaded through :func:`bayesflow.data.load_dataset`, so both tools see the split a
  workflow sees (898 training and 899 test images, pixels scaled to [0, 1]);
- model: bayesflow's ``mlp`` with two hidden layers of 64 ReLU units (d = 8,970);
- prior: diagonal normal of variance 1/40 (the IMDB example's; on digits it underfits,
  MAP about 84% accuracy, DESIGN.md);
- likelihood: categorical.

bayesflow sees it as a flat-parameter :class:`~bayesflow.engines.base.Problem`; posteriors
as the example writes it (a dict of the module's named tensors and
``log_posterior(p, batch) = −cross_entropy + diag_normal_log_prob(p, sd, normalize=False) / N``).
:func:`check_gradients` checks that the two log posteriors have the same gradient.

**The draws of a seed** (:func:`draw`), made once and fed to both tools, follow the recipe
of docs/design.md ("Seeds and streams") from ``generator = torch.Generator().manual_seed(seed)``:

1. the starts: ``problem.init_params(generator)`` once per chain, chain 0 first (a single-
   chain method starts where chain 0 of the parallel run starts);
2. the minibatch order of every epoch: ``randperm(N)`` for one chain, or
   ``bayesflow.engines.fit.chain_orders(N, K, generator).full()`` for K independent chains
   (row k is chain k's order), all epochs drawn here;
3. then bayesflow's ``engine.init`` draws the SGHMC momenta from the same generator, and the
   peer is given those momenta.

A bayesflow fit stage draws the same things in the same kinds of calls, but interleaves each
epoch's order with the steps' noise; here every order is drawn before the first step, so
that the posteriors peer, whose noise comes from torch's global generator, sees the same
orders. The injected noise (SGHMC) and VI's reparameterisation draws are each tool's own.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn import functional

from bayesflow.engines.base import Batch, ChainBatch, Problem
from bayesflow.engines.fit import chain_orders
from bayesflow.likelihoods import Likelihood

__all__ = [
    "DATASET",
    "HIDDEN",
    "PRIOR_VARIANCE",
    "Digits",
    "Draws",
    "batches",
    "check_gradients",
    "draw",
    "load",
    "plain_torch_starts",
]

DATASET = {"name": "sklearn_digits", "test_fraction": 0.5, "split_seed": 0}
# "MLP 64-64": two hidden layers of 64 units; with the prior below MAP reaches the 84%
# test accuracy DESIGN.md records (one hidden layer reaches 92%, measured).
HIDDEN = [64, 64]
# The posteriors IMDB example's prior: sd (1/40) ** 0.5 (examples/imdb/configs/*.py).
PRIOR_VARIANCE = 1 / 40


@dataclass
class Digits:
    """The parity problem in both libraries' forms.

    Attributes:
        problem: bayesflow's flat-parameter problem.
        module: the network; posteriors calls it through ``functional_call`` on a dict.
        likelihood: bayesflow's categorical likelihood (used by the evaluation).
        x_train, y_train, x_test, y_test: the split, as tensors on the device.
    """

    problem: Problem
    module: nn.Module
    likelihood: Likelihood
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor

    @property
    def num_data(self) -> int:
        """N, the number of training images."""
        return self.problem.num_data

    def tree(self, flat: Tensor) -> dict[str, Tensor]:
        """Flat parameters (..., d) as posteriors' tree of named tensors (..., *shape)."""
        sizes = [math.prod(shape) for shape in self.problem.param_shapes]
        lead = tuple(flat.shape[:-1])
        pieces = flat.detach().split(sizes, dim=-1)
        return {
            name: piece.reshape(lead + shape).clone()
            for name, piece, shape in zip(
                self.problem.param_names, pieces, self.problem.param_shapes
            )
        }

    def flat(self, tree: dict[str, Tensor], lead: int = 0) -> Tensor:
        """A tree back to flat parameters, keeping ``lead`` leading (chain) dimensions."""
        pieces = [
            tree[name].detach().reshape(*tree[name].shape[:lead], -1)
            for name in self.problem.param_names
        ]
        return torch.cat(pieces, dim=-1)

    def log_posterior(self, params: dict[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """The IMDB example's ``log_posterior``: mean log-likelihood plus log prior / N."""
        from benchmarks.common.peers import import_posteriors

        inputs, targets = batch
        logits = functional_call(self.module, params, (inputs,))
        log_prior = import_posteriors().diag_normal_log_prob(
            params, sd_diag=PRIOR_VARIANCE**0.5, normalize=False
        )
        return -functional.cross_entropy(logits, targets) + log_prior / self.num_data, logits

    def chains_log_posterior(
        self, params: dict[str, Tensor], batch: Batch
    ) -> tuple[Tensor, Tensor]:
        """K independent chains stacked in one tree (K, ...), each on its own batch (K, B, ...):
        the sum of their log posteriors, whose gradient in chain k is chain k's alone."""
        values = vmap(lambda p, x, y: self.log_posterior(p, (x, y))[0])(params, *batch)
        return values.sum(), values.detach()

    def forward(self, params: dict[str, Tensor], batch: Batch) -> tuple[Tensor, Tensor]:
        """The example's ``forward`` for the GGN Laplace: logits and an empty aux."""
        return functional_call(self.module, params, (batch[0],)), torch.tensor([])

    def outer_log_likelihood(self, logits: Tensor, batch: Batch) -> Tensor:
        """The example's ``outer_log_lik``: Σᵢ log p(yᵢ | logitsᵢ) over the batch."""
        return -functional.cross_entropy(logits, batch[1], reduction="sum")


def load(device: str = "cpu") -> Digits:
    """The digits split, the 64-64 MLP, the 1/40 prior and the categorical likelihood."""
    from bayesflow.data import load_dataset
    from bayesflow.likelihoods import build_likelihood
    from bayesflow.models import build_model
    from bayesflow.priors import build_prior
    from bayesflow.problem import build_problem

    data = load_dataset(DATASET)
    likelihood = build_likelihood({"name": "categorical"})
    prior = build_prior({"name": "diag_normal", "variance": PRIOR_VARIANCE})
    config = {"name": "mlp", "hidden": HIDDEN, "activation": "relu"}
    module = build_model(config, data.num_features, 10)
    problem = build_problem(module, likelihood, prior, len(data.y_train), device)

    def tensor(values: object) -> Tensor:
        return torch.as_tensor(values, device=device)

    return Digits(
        problem,
        module,
        likelihood,
        tensor(data.x_train),
        tensor(data.y_train),
        tensor(data.x_test),
        tensor(data.y_test),
    )


@dataclass
class Draws:
    """What one seed fixes for both tools (see the module docstring).

    Attributes:
        starts: (K, d) initial parameters, chain 0 first.
        orders: one order per epoch: (N,) shared by one chain, or (K, N) one per chain.
        generator: the seed's generator after those draws; bayesflow's ``engine.init``
            draws the momenta from it, and its updates their noise.
    """

    starts: Tensor
    orders: list[Tensor]
    generator: torch.Generator


def draw(digits: Digits, seed: int, chains: int, epochs: int) -> Draws:
    """The starts and every epoch's minibatch order of ``seed`` (docs/design.md's recipe)."""
    generator = torch.Generator().manual_seed(seed)
    problem = digits.problem
    starts = torch.stack([problem.init_params(generator).cpu() for _ in range(chains)])
    count = digits.num_data
    orders = []
    for _ in range(epochs):
        if chains == 1:
            orders.append(torch.randperm(count, generator=generator))
        else:
            orders.append(chain_orders(count, chains, generator).full())
    return Draws(starts.to(problem.device), orders, generator)


def plain_torch_starts(seed: int, chains: int, num_features: int = 64) -> Tensor:
    """The starts of :func:`draw` rebuilt in plain torch, by docs/design.md's recipe: one
    integer from the seed's generator per chain, ``torch.manual_seed`` with it, then the
    model's constructor (bayesflow's ``mlp`` is ``nn.Sequential`` of ``nn.Linear`` and
    ``nn.ReLU``, built here without bayesflow)."""
    generator = torch.Generator().manual_seed(seed)
    widths = [num_features, *HIDDEN]
    starts = []
    with torch.random.fork_rng(devices=[]):
        for _ in range(chains):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
            layers: list[nn.Module] = []
            for width_in, width_out in itertools.pairwise(widths):
                layers += [nn.Linear(width_in, width_out), nn.ReLU()]
            model = nn.Sequential(*layers, nn.Linear(widths[-1], 10))
            starts.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return torch.stack(starts)


def batches(digits: Digits, order: Tensor | None, batch_size: int) -> list[Batch]:
    """One epoch's minibatches: ``order`` (N,) gives ``(inputs, targets)`` pairs, (K, N) gives
    :class:`~bayesflow.engines.base.ChainBatch` es (K, B, ...), None the data in order."""
    inputs, targets = digits.x_train, digits.y_train
    if order is None:
        order = torch.arange(digits.num_data)
    order = order.to(inputs.device)
    result: list[Batch] = []
    for start in range(0, digits.num_data, batch_size):
        index = order[..., start : start + batch_size]
        if index.dim() == 1:
            result.append((inputs[index], targets[index]))
        else:
            result.append(ChainBatch(inputs[index], targets[index]))
    return result


def check_gradients(digits: Digits, params: Tensor, batch: Batch) -> float:
    """The largest difference between the two tools' log-posterior gradients at ``params``.

    Raises:
        AssertionError: when they differ by more than float32 rounding (the comparison
            would then compare two different targets).
    """
    flat = params.detach().clone().requires_grad_(True)
    (ours,) = torch.autograd.grad(digits.problem.log_posterior(flat, batch), flat)
    tree = {name: value.requires_grad_(True) for name, value in digits.tree(params).items()}
    value, _ = digits.log_posterior(tree, batch)
    theirs = digits.flat(dict(zip(tree, torch.autograd.grad(value, list(tree.values())))))
    difference = float((ours - theirs).abs().max())
    scale = float(ours.abs().max())
    if difference > 1e-5 * max(1.0, scale):
        raise AssertionError(
            f"the two log posteriors' gradients differ by {difference:.3g} at the same θ and "
            "batch; the comparison would compare different targets"
        )
    return difference
