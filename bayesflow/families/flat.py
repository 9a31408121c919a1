"""The flat family: a registered or ``python:`` network whose every parameter is inferred,
seen by the engines as one flat vector (:func:`bayesflow.problem.build_problem`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayesflow.families.base import Sizes

if TYPE_CHECKING:
    from torch import nn

    from bayesflow.data import Dataset
    from bayesflow.engines.base import Problem
    from bayesflow.likelihoods import Likelihood
    from bayesflow.spec.load import LoadedSpec

__all__ = ["FAMILY", "FlatFamily"]


class FlatFamily:
    """Networks over a flat parameter vector, predicting a table's targets."""

    def check_model(self, loaded: LoadedSpec) -> None:
        """Nothing to check before the data: the network's size comes from them."""

    def check_with_data(self, loaded: LoadedSpec, dataset: Dataset) -> None:
        """A ``python:`` model's module imported and its factory called now, under the
        user-code guard, so that validate and run refuse code that fails, exits or hangs
        (exit 3) with the message a fit would give."""
        if loaded.spec.model.name != "python":  # the registered networks are ours
            return
        from bayesflow.problem import build_network

        build_network(loaded.spec, dataset.num_features, dataset.num_classes, loaded.spec.seeds[0])

    def problem(
        self, spec: Any, sizes: Sizes, prior: Any, device: Any, base_dir: Path | None
    ) -> tuple[Problem, Likelihood]:
        """The network initialised under ``torch.manual_seed(sizes.seed)``, its outputs from
        the likelihood and ``num_classes``; N the training targets' rows."""
        from bayesflow.problem import build_network, build_problem

        assert sizes.num_features is not None, "a flat network's inputs come from the data"
        likelihood, module = build_network(spec, sizes.num_features, sizes.num_classes, sizes.seed)
        num_data = 1 if sizes.train_targets is None else likelihood.data_points(sizes.train_targets)
        return build_problem(module, likelihood, prior, num_data, device), likelihood

    def module_with(self, problem: Problem, params: Any) -> nn.Module:
        """A copy of the network with ``params`` as its parameters, in eval mode."""
        import copy

        import torch
        from torch.nn.utils import vector_to_parameters

        assert problem.module is not None, "a flat problem calls its network"
        network = copy.deepcopy(problem.module)
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(params).to(next(network.parameters()).dtype),
                                 network.parameters())
        return network.eval()

    def posterior_files(self, spec: Any, base_dir: Path | None) -> dict[str, str]:
        """None: ``posterior.npz`` and the run's spec rebuild the network."""
        return {}


FAMILY = FlatFamily()
