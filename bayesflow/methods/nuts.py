"""Full-batch No-U-Turn sampling through pyro (``nuts``), the reference for small models.

NUTS (Hoffman & Gelman, 2014, https://arxiv.org/abs/1111.4246) as implemented by pyro
(Bingham et al., 2019, https://arxiv.org/abs/1810.09538), with step-size adaptation by
dual averaging to ``target_accept`` and a diagonal mass matrix adapted during
``warmup``. It samples the flat parameter vector through pyro's ``potential_fn``
interface, with the potential energy of the tempered posterior of
:mod:`bayesflow.temperature`::

    U_T(θ) = −N · f(θ; data) / T = −(Σᵢ log p(yᵢ|xᵢ,θ) + c · log p(θ)) / T

so the target is ``exp(N f / T) = exp(f / 𝒯)`` (c the prior weight of the convention).
NUTS is exact up to Monte Carlo error, with no step-size bias, which makes it the gold
standard for models such as logistic regression; it needs the full data at every
gradient, so the engine makes one pass with one full batch. T = 0 is refused: the target
is then a point mass, which ``map`` finds.

``chains: K`` runs K chains one after another (pyro's parallel chains need processes);
chain 0 starts from the parameters given to ``init`` and chains 1…K−1 from
``problem.init_params`` draws, as the SG-MCMC chains do. Each chain runs under its own
seed drawn from the fit's generator, inside ``torch.random.fork_rng``, so the same seed
gives the same samples and the global RNG is left alone. pyro is an optional extra
(``pip install 'bayesflow-workflows[nuts]'``), imported when the engine is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field, PositiveInt

from bayesflow.errors import MissingDependencyError, StageError
from bayesflow.methods.base import Method, MethodBase, Traits

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from bayesflow.engines.base import Batch, Engine, Posterior, Problem
    from bayesflow.temperature import Tempering

__all__ = ["METHODS", "NUTSSpec", "NUTSState", "build", "import_pyro"]


class NUTSSpec(MethodBase):
    """Full-batch No-U-Turn sampler through pyro (``nuts``; extra `bayesflow-workflows[nuts]`)."""

    engine: Literal["nuts"] = Field(description="Registry name of the engine.")
    warmup: int = Field(500, ge=0, description="Warm-up (adaptation) iterations per chain.")
    num_samples: PositiveInt = Field(1000, description="Samples kept per chain.")
    chains: PositiveInt = Field(1, description="Number of chains (run one after another).")
    target_accept: float = Field(
        0.8, gt=0, lt=1, description="Target acceptance probability of step-size adaptation."
    )
    max_tree_depth: PositiveInt = Field(10, description="Largest tree depth of a NUTS step.")


def build(problem: Problem, tempering: Tempering, config: NUTSSpec) -> Engine:
    """Full-batch NUTS on ``U_T(θ) = −N f(θ) / T``; see the module docstring.

    Args:
        problem: the model, likelihood, prior and data size.
        tempering: T divides the potential; the convention sets the prior weight.
        config: the method's spec (warm-up, samples, chains, target acceptance, depth).

    Raises:
        StageError: at T = 0, where the tempered posterior is a point mass.
        MissingDependencyError: when pyro is not installed.
    """
    import torch

    from bayesflow.engines.base import Engine, Posterior
    from bayesflow.engines.sgmcmc import chain_starts

    if tempering.temperature == 0:
        raise StageError(
            "nuts cannot sample at T = 0: the tempered posterior is a point mass at the "
            "mode; drop 0 from `temperatures` for this method, or use `map`"
        )
    mcmc = import_pyro()
    temperature, prior_weight = tempering.temperature, tempering.prior_weight
    num_data = problem.num_data

    def potential(batch: Batch) -> Any:
        def energy(values: dict[str, Tensor]) -> Tensor:
            log_posterior = problem.log_posterior(values["params"], batch, prior_weight)
            return -num_data * log_posterior / temperature

        return energy

    def run_chain(start: Tensor, batch: Batch, seed: int) -> tuple[Tensor, int, float]:
        """One chain's samples (S, d), its divergent transitions and acceptance rate."""
        kernel = mcmc.NUTS(
            potential_fn=potential(batch),
            target_accept_prob=config.target_accept,
            max_tree_depth=config.max_tree_depth,
        )
        diagnostics: dict[str, Any] = {}

        def record(kernel: Any, values: Any, stage: str, index: int) -> None:
            # The kernel resets its counters when the run ends: read them at the last draw.
            if stage.startswith("Sample") and index == config.num_samples - 1:
                diagnostics.update(kernel.diagnostics())

        sampler = mcmc.MCMC(
            kernel,
            num_samples=config.num_samples,
            warmup_steps=config.warmup,
            initial_params={"params": start},
            hook_fn=record,
            disable_progbar=True,
        )
        devices = [start.device] if start.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            sampler.run()
        # Divergences are counted from the first kept draw; warm-up ones have negative indices.
        divergences = sum(1 for index in diagnostics["divergences"] if index >= 0)
        samples = sampler.get_samples()["params"].detach()
        return samples, divergences, float(diagnostics["acceptance rate"])

    def init(params: Tensor, generator: torch.Generator) -> NUTSState:
        return NUTSState(params.detach().clone(), None, generator, 0)

    def update(state: NUTSState, batch: Batch) -> tuple[NUTSState, dict[str, Tensor]]:
        starts = chain_starts(problem, state.params, config.chains, state.generator)
        draws, divergences, acceptance = [], 0, 0.0
        for start in starts:
            seed = torch.randint(
                0, 2**31 - 1, (1,), generator=state.generator, device=state.generator.device
            )
            chain, count, rate = run_chain(start, batch, int(seed))
            draws.append(chain)
            divergences += count
            acceptance += rate / len(starts)
        samples = torch.cat(draws)
        with torch.no_grad():
            value = problem.log_posterior(draws[0][-1], batch, prior_weight)
        aux = {
            "loss": -value,
            "log_posterior": value,
            "divergences": torch.tensor(float(divergences)),
            "acceptance_rate": torch.tensor(acceptance),
        }
        return NUTSState(draws[0][-1], samples, state.generator, state.step + 1), aux

    def posterior(state: NUTSState) -> Posterior:
        if state.samples is None:
            raise StageError("nuts has no samples: run at least one update (fit) first")
        return Posterior(samples=state.samples)

    return Engine(init, update, posterior, 1, None)


class NUTSState(NamedTuple):
    """The state of a NUTS fit.

    Attributes:
        params: where the chains start (d,); after an update, chain 0's last sample.
        samples: the kept samples, each chain's contiguous (K · S, d); None before any update.
        generator: the source of the chains' seeds and starting points.
        step: update steps (NUTS runs) taken.
    """

    params: Tensor
    samples: Tensor | None
    generator: torch.Generator
    step: int


def import_pyro() -> Any:
    """``pyro.infer.mcmc``, or a :class:`MissingDependencyError` with the install command."""
    try:
        from pyro.infer import mcmc
    except ImportError as exc:
        raise MissingDependencyError(
            "the nuts engine needs pyro, an optional extra; install it with "
            "`pip install 'bayesflow-workflows[nuts]'`"
        ) from exc
    return mcmc


METHODS = (
    Method(
        "nuts", NUTSSpec,
        Traits(positive_temperature=True, diagnostics=frozenset({"convergence"})),
        build, label="NUTS",
    ),
)
