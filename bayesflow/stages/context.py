"""What every stage of one workflow shares: the spec, the data, the device, the problem.

A :class:`WorkflowContext` is built once per run (and once per worker process) and
handed to every stage function. It holds no state that a stage changes, so it pickles
to worker processes and Ray tasks as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bayesflow.dag.plan import Stage
from bayesflow.data import Dataset
from bayesflow.errors import BayesflowError, StageError
from bayesflow.methods.registry import traits_of
from bayesflow.spec.load import LoadedSpec

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["WorkflowContext", "describe_cell", "describe_error", "holds_gpu"]


@dataclass(frozen=True)
class WorkflowContext:
    """The spec and the data of one workflow, and how to build a stage's problem.

    Attributes:
        loaded: the validated spec.
        dataset: the loaded data.
    """

    loaded: LoadedSpec
    dataset: Dataset

    @property
    def spec(self) -> Any:
        """The validated :class:`~bayesflow.spec.models.WorkflowSpec`."""
        return self.loaded.spec

    def method(self, stage: Stage) -> Any:
        """The spec of the method a stage fits or evaluates."""
        return self.spec.methods[stage.method or ""]

    def device(self) -> torch.device:
        """The torch device ``execution.device`` asks for (``auto``: CUDA when present),
        with ``execution.threads`` applied."""
        import torch

        threads = self.spec.execution.threads
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        wanted = self.spec.execution.device
        if wanted == "auto":
            wanted = "cuda" if holds_gpu() else "cpu"
        if wanted == "cuda" and not torch.cuda.is_available():
            raise StageError(
                "execution.device is `cuda` but torch sees no CUDA device; "
                "set execution.device=cpu or auto"
            )
        return torch.device(wanted)

    def problem(self, stage: Stage) -> tuple[Any, Any, Any]:
        """The flat-parameter problem, the likelihood and the tempering of a stage, built by
        the spec's model family (:mod:`bayesflow.families`).

        The network is initialised under ``torch.manual_seed(stage.seed)``; a method that
        ignores the prior (its traits' ``uses_prior``) gets none; a stage without a
        temperature (a fit shared by every temperature, the prior predictive check) is
        tempered at T = 1.
        """
        from bayesflow.families import family_of
        from bayesflow.families.base import Sizes
        from bayesflow.priors import build_prior, none
        from bayesflow.temperature import Tempering

        spec = self.spec
        prior = build_prior(spec.prior.model_dump())
        if stage.engine and not traits_of(stage.engine).uses_prior:
            prior = none()
        sizes = Sizes(self.dataset.num_features, self.dataset.num_classes, stage.seed or 0, self.dataset.y_train,
                      self.dataset.continuation_tokens)
        problem, likelihood = family_of(spec).implementation().problem(
            spec, sizes, prior, self.device(), self.loaded.base_dir
        )
        temperature = 1.0 if stage.temperature is None else stage.temperature
        tempering = Tempering(temperature, problem.num_data, spec.temperature_convention)
        return problem, likelihood, tempering

    def tensors(self, inputs: np.ndarray, targets: np.ndarray, device: Any) -> tuple[Any, Any]:
        """Two arrays as tensors on ``device``."""
        import torch

        return torch.as_tensor(inputs, device=device), torch.as_tensor(targets, device=device)

    def training_data(self, device: Any) -> tuple[Any, Any]:
        """The training inputs and targets on ``device``."""
        return self.tensors(self.dataset.x_train, self.dataset.y_train, device)

    def test_data(self, device: Any) -> tuple[Any, Any]:
        """The test inputs and targets on ``device``."""
        return self.tensors(self.dataset.x_test, self.dataset.y_test, device)

    def generator(self, device: Any, seed: int) -> torch.Generator:
        """A torch generator on ``device`` seeded with ``seed``."""
        import torch

        return torch.Generator(device=device).manual_seed(int(seed))


def holds_gpu() -> bool:
    """Whether this process may use a CUDA device: torch sees one and, inside a Ray task,
    the task holds a GPU (Ray leaves every GPU visible to a task that asked for none, so
    ``execution.device: auto`` would otherwise share a GPU that another task holds)."""
    import sys

    import torch

    if not torch.cuda.is_available():
        return False
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from ray._private.worker import WORKER_MODE

        if ray.get_runtime_context().worker.mode == WORKER_MODE:  # a task, not the driver
            return bool(ray.get_gpu_ids())
    return True


def describe_cell(stage: Stage) -> str:
    """``method 'x' (engine) at temperature T, seed s``: the cell a stage belongs to."""
    temperature = "shared" if stage.temperature is None else f"{stage.temperature:g}"
    return f"method {stage.method!r} ({stage.engine}) at temperature {temperature}, seed {stage.seed}"


def describe_error(error: BaseException) -> str:
    """A one-line message for a stage error."""
    if isinstance(error, BayesflowError):
        return str(error)
    return f"{type(error).__name__}: {error}"
