"""Turn a torch module, a likelihood and a prior into a flat-parameter :class:`Problem`.

Engines see the model only through ``forward(params, inputs)`` on a flat vector, built
with ``torch.func.functional_call``; this keeps every engine's state one tensor (or a
batch of them for parallel chains) and makes ``vmap`` over chains straightforward.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from bayesflow.engines.base import Problem
from bayesflow.likelihoods import Likelihood
from bayesflow.priors import Prior

__all__ = ["build_network", "build_problem", "flatten_module"]


def flatten_module(module: nn.Module) -> tuple[Tensor, tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Return a module's parameters as one flat vector, their names and shapes."""
    names, shapes, pieces = [], [], []
    for name, param in module.named_parameters():
        names.append(name)
        shapes.append(tuple(param.shape))
        pieces.append(param.detach().reshape(-1))
    return torch.cat(pieces), tuple(names), tuple(shapes)


def build_problem(
    module: nn.Module,
    likelihood: Likelihood,
    prior: Prior,
    num_data: int,
    device: torch.device | str = "cpu",
) -> Problem:
    """Build the flat-parameter view of ``module`` under ``likelihood`` and ``prior``.

    Args:
        module: the network; its parameters' current values are not used, only its
            structure and its initialisation (``init_params`` re-initialises a copy).
        likelihood: the observation model.
        prior: the prior over every parameter; bound here to the module's tensor names
            and shapes (per-tensor variances need them).
        num_data: N, the number of training points.
        device: where parameters and data live.
    """
    device = torch.device(device)
    module = module.to(device)
    flat, names, shapes = flatten_module(module)
    sizes = [int(torch.Size(shape).numel()) for shape in shapes]
    bound_prior = prior.bind(names, shapes, flat.dtype, device)

    def unflatten(params: Tensor) -> dict[str, Tensor]:
        return {
            name: piece.reshape(shape)
            for name, piece, shape in zip(names, params.split(sizes), shapes)
        }

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        return functional_call(module, unflatten(params), (inputs,))

    # Initialisation runs on a CPU copy under the CPU generator only: the same seed gives
    # the same start on every device, and no CUDA seeding is queued per chain (measured:
    # torch.manual_seed cost 0.49 ms per chain against 0.04 ms, benchmarks/studies/profile.py).
    template = copy.deepcopy(module).cpu()

    def init_params(generator: torch.Generator) -> Tensor:
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            for child in template.modules():
                reset = getattr(child, "reset_parameters", None)
                if callable(reset):
                    reset()
            values, _, _ = flatten_module(template)
        return values.to(device)

    return Problem(
        forward=forward,
        log_likelihood=likelihood.log_prob,
        output_hessian=likelihood.output_hessian,
        log_prior=bound_prior.log_prob,
        prior_precision=bound_prior.precision,
        num_data=num_data,
        dimension=int(flat.numel()),
        param_names=names,
        param_shapes=shapes,
        init_params=init_params,
        likelihood=likelihood.name,
        device=device,
        observation=likelihood,
        module=module,  # engines/flat.py and engines/kfac.py read its layers
    )


def build_network(
    spec: Any, num_features: int, num_classes: int | None, seed: int
) -> tuple[Likelihood, nn.Module]:
    """The likelihood and the network of a fit cell of ``spec`` (a workflow spec), the
    network initialised under ``torch.manual_seed(seed)``: the fit stages and a loaded
    posterior build the same network this one way.

    Args:
        spec: the validated workflow spec (its ``model`` and ``likelihood``).
        num_features: inputs per example.
        num_classes: classes of a classification target (None for a real-valued one).
        seed: the cell's seed.
    """
    from bayesflow.likelihoods import build_likelihood
    from bayesflow.models import build_model

    likelihood = build_likelihood(spec.likelihood.model_dump())
    outputs = likelihood.num_outputs(num_classes)
    torch.manual_seed(seed)
    return likelihood, build_model(spec.model.model_dump(), num_features, outputs)
