"""The two sides of every comparison: a bayesflow engine and its posteriors transform.

Both sides get the same hyper-parameters (:data:`HYPER`), the same temperature in the
same convention (the user's T; posteriors is given 𝒯 = T / N, its per-datum temperature,
as its documentation recommends with a per-datum log posterior), the same starting
parameters and momenta, and the same batches.

posteriors 0.1.3 states are tensorclasses whose scalar fields (``step``,
``log_posterior``, ``nelbo``) default to ONE tensor shared by every instance; an
in-place update writes into that shared default, so a later ``init`` starts from the
leaked values (DESIGN.md). :func:`fresh` gives each state its own copies.

K chains run through posteriors two ways: looped (K states, one update each, in Python:
:class:`LoopStepper`), and **stacked**, the way a performance-minded user would run it
(:func:`stacked_transform`): ONE state whose params are a (K, d) tensor and a log
posterior that returns the sum of the K chains' log posteriors (``vmap`` of the per-chain
function over the chains, and over their batches when each has its own), so posteriors'
one ``grad_and_value`` gives every chain's gradient. Its SGHMC update is element-wise, so
the stacked state is K independent chains.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch import Tensor
from torch.func import vmap

from bayesflow.engines.base import Batch, ChainBatch, Engine
from bayesflow.temperature import Tempering
from benchmarks.common.problems import Setup

__all__ = [
    "HYPER",
    "LoopStepper",
    "Stepper",
    "bayesflow_engine",
    "bayesflow_has",
    "bayesflow_state",
    "fresh",
    "import_posteriors",
    "peer_state",
    "peer_transform",
    "posteriors_version",
    "stacked_transform",
]

# One table of hyper-parameters for both libraries. SGHMC: step size 0.1 and friction 1
# are the default workflow's (heavy-ball SGD with momentum 0.9); VI and MAP: Adam.
HYPER: dict[str, dict[str, Any]] = {
    "sghmc": {"lr": 0.1, "alpha": 1.0, "beta": 0.0},
    "vi_diag": {"lr": 1e-2, "init_log_sd": -3.0, "n_samples": 1, "stick_the_landing": True},
    "map": {"lr": 3e-3},
    "laplace_diag_ggn": {},
    "laplace_diag_fisher": {},
}


def import_posteriors() -> ModuleType:
    """posteriors, imported without its tensordict FutureWarnings (one per state class)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import posteriors
        import posteriors.laplace.diag_fisher
        import posteriors.laplace.diag_ggn
        import posteriors.sgmcmc.sghmc
        import posteriors.torchopt
        import posteriors.vi.diag
    return posteriors


def posteriors_version() -> str:
    """The installed posteriors version."""
    from importlib.metadata import version

    return version("posteriors")


def bayesflow_has(engine: str) -> bool:
    """Whether bayesflow's registry holds ``engine``."""
    from bayesflow.methods import METHODS

    return engine in METHODS.names()


def bayesflow_engine(
    setup: Setup,
    method: str,
    *,
    temperature: float = 1.0,
    batch_size: int | None = None,
    chains: int = 1,
    epochs: int = 1,
) -> Engine:
    """The bayesflow engine of ``method`` built from its spec model, as a workflow would."""
    from bayesflow.methods import METHODS

    hyper = HYPER[method]
    fields: dict[str, Any] = {"engine": method, "batch_size": batch_size}
    if method == "sghmc":
        fields.update(
            lr=hyper["lr"],
            alpha=hyper["alpha"],
            beta=hyper["beta"],
            chains=chains,
            keep="last",
            epochs=epochs,
        )
    elif method == "vi_diag":
        fields.update(
            optimizer={"name": "adam", "lr": hyper["lr"]},
            n_samples=hyper["n_samples"],
            init_log_sd=hyper["init_log_sd"],
            stick_the_landing=hyper["stick_the_landing"],
            epochs=epochs,
        )
    elif method == "map":
        fields.update(optimizer={"name": "adam", "lr": hyper["lr"]}, epochs=epochs)
    config = METHODS.get(method).spec.model_validate(fields)
    tempering = Tempering(temperature, setup.num_data)
    return METHODS.get(method).builder()(setup.problem, tempering, config)


def bayesflow_state(engine: Engine, setup: Setup, seed: int = 0) -> Any:
    """``engine.init`` at the shared start, with a generator on the data's device."""
    generator = torch.Generator(device=setup.problem.device).manual_seed(seed)
    return engine.init(setup.start, generator)


def peer_transform(
    setup: Setup, method: str, *, temperature: float = 1.0, flat: bool = False
) -> Any:
    """The posteriors transform matching ``bayesflow_engine(setup, method, ...)``.

    Args:
        flat: give posteriors one flat tensor and bayesflow's flat log posterior instead
            of its usual tree of named tensors (a variant, to separate the cost of the
            tree from the cost of the update).
    """
    import torchopt

    posteriors = import_posteriors()
    hyper = HYPER[method]
    per_datum = temperature / setup.num_data
    log_posterior = setup.flat_log_posterior if flat else setup.log_posterior
    if method == "sghmc":
        return posteriors.sgmcmc.sghmc.build(
            log_posterior,
            lr=hyper["lr"],
            alpha=hyper["alpha"],
            beta=hyper["beta"],
            temperature=per_datum,
        )
    if method == "vi_diag":
        return posteriors.vi.diag.build(
            log_posterior,
            torchopt.adam(lr=hyper["lr"]),
            temperature=per_datum,
            n_samples=hyper["n_samples"],
            stl=hyper["stick_the_landing"],
            init_log_sds=hyper["init_log_sd"],
        )
    if method == "map":
        loss = (lambda p, b: tuple_negate(setup.flat_log_posterior(p, b))) if flat else setup.loss
        return posteriors.torchopt.build(loss, torchopt.adam(lr=hyper["lr"]))
    if method == "laplace_diag_ggn":
        forward: Callable[..., Any] = (
            (lambda p, b: (setup.problem.forward(p, b[0]), torch.tensor([])))
            if flat
            else setup.forward
        )
        return posteriors.laplace.diag_ggn.build(forward, setup.outer_log_likelihood)
    if method == "laplace_diag_fisher":
        return posteriors.laplace.diag_fisher.build(log_posterior)
    raise ValueError(f"no posteriors peer for {method!r}")


def stacked_transform(setup: Setup, *, temperature: float = 1.0) -> Any:
    """posteriors' SGHMC over a stacked (K, d) state: the chains' summed log posterior.

    ``log_posterior(params (K, d), batch) -> (Σ_k f_k, (f_k) (K,))`` with ``f_k`` the
    per-datum log posterior of chain k on its batch (a ``ChainBatch``: chain k's own; a
    plain batch: the one every chain shares), vmapped over the chains.
    """
    posteriors = import_posteriors()
    hyper = HYPER["sghmc"]

    def per_chain(params: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        return setup.problem.log_posterior(params, (inputs, targets))

    own_batches = vmap(per_chain, in_dims=(0, 0, 0))
    shared_batch = vmap(per_chain, in_dims=(0, None, None))

    def log_posterior(params: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        values = (own_batches if isinstance(batch, ChainBatch) else shared_batch)(params, *batch)
        return values.sum(), values

    return posteriors.sgmcmc.sghmc.build(
        log_posterior,
        lr=hyper["lr"],
        alpha=hyper["alpha"],
        beta=hyper["beta"],
        temperature=temperature / setup.num_data,
    )


def tuple_negate(pair: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """``(value, aux) -> (−value, aux)``."""
    return -pair[0], pair[1]


def peer_state(
    transform: Any,
    setup: Setup,
    params: Tensor,
    *,
    momenta: Tensor | None = None,
    flat: bool = False,
) -> Any:
    """``transform.init`` at flat ``params`` (and SGHMC ``momenta``), with fresh defaults."""
    tree: Any = params.detach().clone() if flat else setup.tree(params)
    if momenta is None:
        return fresh(transform.init(tree))
    momenta_tree: Any = momenta.detach().clone() if flat else setup.tree(momenta)
    posteriors = import_posteriors()
    return fresh(posteriors.sgmcmc.sghmc.init(tree, momenta=momenta_tree))


def fresh(state: Any) -> Any:
    """A copy of a posteriors state whose class-default tensors are its own (see above)."""
    values = {}
    for field in dataclasses.fields(type(state)):
        value = getattr(state, field.name)
        if (
            isinstance(value, Tensor)
            and isinstance(field.default, Tensor)
            and value is field.default
        ):
            value = value.clone()
        values[field.name] = value
    return type(state)(**values)


class Stepper:
    """One update per call, on batches taken round and round; the state is carried.

    Args:
        update: ``(state, batch) -> (state, aux)``.
        state: the initial state.
        batches: the batches, used in order and cycled.
    """

    def __init__(
        self, update: Callable[[Any, Batch], tuple[Any, Any]], state: Any, batches: list[Batch]
    ) -> None:
        self.update = update
        self.state = state
        self.batches = batches
        self.position = 0

    def __call__(self) -> None:
        batch = self.batches[self.position]
        self.position = (self.position + 1) % len(self.batches)
        self.state, _ = self.update(self.state, batch)


class LoopStepper:
    """posteriors' plain way to run K chains: a Python loop over K states, one update each.

    A ``ChainBatch`` is split into each chain's own batch once, here, outside the clock;
    a plain batch is shared by every chain.
    """

    def __init__(
        self,
        update: Callable[[Any, Batch], tuple[Any, Any]],
        states: list[Any],
        batches: list[Batch],
    ) -> None:
        self.update = update
        self.states = states
        self.batches = [
            (
                [(batch.inputs[k], batch.targets[k]) for k in range(len(states))]
                if isinstance(batch, ChainBatch)
                else [batch] * len(states)
            )
            for batch in batches
        ]
        self.position = 0

    def __call__(self) -> None:
        batches = self.batches[self.position]
        self.position = (self.position + 1) % len(self.batches)
        update = self.update
        self.states = [update(state, batch)[0] for state, batch in zip(self.states, batches)]
