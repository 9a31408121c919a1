"""The exceptions bayesflow raises.

Every error the tool raises on purpose derives from :class:`BayesflowError`, so a caller
can catch one class. The tree::

    BayesflowError
    ├── SpecError                 the workflow spec is invalid (exit code 3)
    │   └── DataError             the data it names cannot be used as they are (exit code 3)
    ├── RegistryError             a name is not in a registry (wrapped into SpecError when
    │                             it comes from a spec)
    ├── MissingDependencyError    an optional extra is not installed
    ├── ClusterError              the Ray cluster at execution.address cannot be reached
    ├── StageError                a stage failed while running (exit code 1)
    │   ├── DivergenceError       a fit produced NaN or inf
    │   └── ReportError           a report cell raised (bayesflow.report.render)
    ├── TrackingError             the tracking store could not be read or written (exit
    │                             code 1: read-only, full or locked, see tracking/preflight.py)
    ├── UsageError                a command was called in a way that cannot work (exit code 2)
    │   └── TaskError             an lm-eval task a posterior cannot score: unreadable, unknown,
    │                             or generative (bayesflow.posterior.harness)
    ├── PosteriorError            a fitted posterior cannot be loaded (bayesflow.posterior)
    ├── ModelSourceError          a pretrained model cannot be fetched, checked or converted
    │                             into the model cache (exit code 1; bayesflow.llm.pull)
    │   └── NoDensityError        it has no density to evaluate (samples, a point mass)
    └── CacheLockError            another run holds the cache folder (exit code 1)

A message says what went wrong, where, what was expected and found, and what to do.
"""

from __future__ import annotations

__all__ = [
    "BayesflowError",
    "CacheLockError",
    "ClusterError",
    "DataError",
    "DivergenceError",
    "MissingDependencyError",
    "ModelSourceError",
    "RegistryError",
    "SpecError",
    "StageError",
    "TaskError",
    "TrackingError",
    "UsageError",
]


class BayesflowError(Exception):
    """Base class of every error bayesflow raises on purpose."""

    exit_code = 1


class SpecError(BayesflowError):
    """The workflow spec cannot be loaded or is invalid.

    Args:
        problems: one line per problem, each naming its location and fix.
        path: the spec file, when there is one.
    """

    exit_code = 3

    def __init__(self, problems: list[str] | str, path: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.path = path
        count = len(self.problems)
        head = f"{path}: " if path else ""
        noun = "problem" if count == 1 else "problems"
        body = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"{head}invalid workflow spec ({count} {noun}):\n{body}")


class DataError(SpecError):
    """The data a spec names cannot be used as they are: checked when they are loaded,
    before any fit (labels outside the likelihood's support, NaN, too few rows).

    Args:
        problems: one line per problem, each naming the column and the fix.
        path: the data file (or the dataset's name) the problems were found in.
    """

    def __init__(self, problems: list[str] | str, path: str | None = None) -> None:
        super().__init__(problems, path)
        count = len(self.problems)
        head = f"{path}: " if path else ""
        noun = "problem" if count == 1 else "problems"
        body = "\n".join(f"  - {problem}" for problem in self.problems)
        self.args = (f"{head}unusable data ({count} {noun}):\n{body}",)


class RegistryError(BayesflowError, KeyError):
    """A name was looked up in a registry that does not hold it."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


class MissingDependencyError(BayesflowError, ImportError):
    """An optional dependency is needed; the message names the install command."""


class ClusterError(BayesflowError):
    """The Ray cluster ``execution.address`` names does not answer, or refuses the driver
    (exit code 1, as the tracking store's and the cache lock's errors)."""

    exit_code = 1


class StageError(BayesflowError):
    """A stage of the plan failed."""

    exit_code = 1


class DivergenceError(StageError):
    """A fit produced a non-finite loss or parameters."""


class TrackingError(BayesflowError):
    """The tracking store could not be read or written."""


class CacheLockError(BayesflowError):
    """Another process holds the lock of the cache folder a run needs, and this run was
    told not to wait (or waited past its timeout). Exit code 1: the run did not start."""

    exit_code = 1


class ModelSourceError(BayesflowError):
    """A pretrained model cannot be fetched, checked or converted (:mod:`bayesflow.llm.pull`,
    :mod:`bayesflow.llm.gguf`): pip reaches no index, the wheel's digest is not the pinned
    one, a file is not a complete GGUF or holds what transformers cannot read, the model
    cache is read-only or full. Exit code 1; nothing is left half-written. A spec naming
    such a model gets the same message as a :class:`SpecError` at ``model.path``."""

    exit_code = 1


class UsageError(BayesflowError):
    """A command was called in a way that cannot work (a busy port, a bad argument)."""

    exit_code = 2


class TaskError(UsageError):
    """An lm-eval task a posterior cannot score: a task YAML lm-eval cannot read (the
    file and lm-eval's reason), a task name found nowhere, or a ``generate_until`` task
    (bayesflow scores text, it does not generate it). Exit code 2."""
