"""What a model family implements (:class:`Family`), and the sizes a problem is built at.

The registry entry (:class:`bayesflow.families.FamilyEntry`) says which specs a family
owns; its ``FAMILY`` object does the work. Every caller that needs a problem (the stages,
``load_posterior``, the pyfunc models, a saved language-model posterior) calls
:meth:`Family.problem`, so a family builds its problem in one place.
Implementations import torch and their extras inside their methods: the tracking worker
and the spec layer import this module without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import nn

    from bayesflow.data import Dataset
    from bayesflow.engines.base import Problem
    from bayesflow.likelihoods import Likelihood
    from bayesflow.spec.load import LoadedSpec

__all__ = ["Family", "Sizes"]


@dataclass(frozen=True)
class Sizes:
    """What a problem is built at, beyond the spec.

    Attributes:
        num_features: inputs per example (from the data, or a fit run's params).
        num_classes: classes of a classification target; None for a real-valued one.
        seed: the fit cell's seed (a network is initialised under it).
        train_targets: the training targets (anything with a ``shape``): N is the number of
            data points they hold (the likelihood says how many); None for a problem that
            only predicts (N = 1).
        continuation_tokens: the most continuation tokens of a multiple-choice question
            scored as continuations (:attr:`bayesflow.data.Dataset.continuation_tokens`).
    """

    num_features: int | None = None
    num_classes: int | None = None
    seed: int = 0
    train_targets: Any = None
    continuation_tokens: int | None = None


class Family(Protocol):
    """A model family's implementation (``FAMILY`` in its module)."""

    def check_model(self, loaded: LoadedSpec) -> None:
        """Refuse at ``validate`` what the model cannot run, before the data are read
        (a located :class:`~bayesflow.errors.SpecError`)."""

    def check_with_data(self, loaded: LoadedSpec, dataset: Dataset) -> None:
        """Refuse at ``validate`` what the model cannot run on the loaded data."""

    def problem(
        self, spec: Any, sizes: Sizes, prior: Any, device: Any, base_dir: Path | None
    ) -> tuple[Problem, Likelihood]:
        """The problem of a fit cell of ``spec`` (a workflow spec) and its likelihood."""

    def module_with(self, problem: Problem, params: Any) -> nn.Module:
        """A copy of the problem's model (eval mode) with the flat vector ``params`` set."""

    def posterior_files(self, spec: Any, base_dir: Path | None) -> dict[str, str]:
        """Files a fit run logs beside ``posterior.npz`` in its ``posterior`` folder, by name."""
