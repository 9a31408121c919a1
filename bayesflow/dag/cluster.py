"""The Ray executor: stages as Ray tasks on a local Ray or a cluster with no shared folder.

What travels where (see ``docs/distributed.md``):

- the stage runner, which holds the spec and the data (read on the driver), is put into
  Ray's object store once per run (:func:`ray.put`), and every task gets its reference;
- each input entry is put once per run as a :class:`~bayesflow.dag.transfer.PackedEntry`
  and handed to the tasks that read it as a reference;
- a task computes its stage in a scratch folder of its node
  (:func:`~bayesflow.dag.transfer.run_packed`) and returns the values and files; the
  driver writes them into its staging folder, and the scheduler commits them to the
  cache and calls the hooks (MLflow) in the driver alone.

Kinds in :attr:`RayExecutor.driver_kinds` (the report, which renders the spec's template
with the kernel the driver started while the fits ran) are computed in the driver.

A failed task's error names the exception, its message and the node it ran on, without
Ray's terminal colours; its remote traceback travels as a note (shown with ``--debug``).
A task whose worker or node died is retried by Ray on the nodes left (three times, Ray's
default); a task that cannot be retried fails with Ray's error named, and a rerun
computes exactly the stages that failed (the others are in the cache).
"""

from __future__ import annotations

import contextlib
import re
import socket
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bayesflow.dag.cache import Entry
from bayesflow.dag.plan import Stage
from bayesflow.dag.transfer import PackedResult, pack_entry, run_packed, unpack_files
from bayesflow.errors import BayesflowError, ClusterError, StageError

__all__ = ["RayExecutor", "RemoteStageError", "check_reachable", "remote_error", "task_options"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WHERE = re.compile(r"\(pid=(?P<pid>\d+), ip=(?P<ip>[^)]+)\)")
# Seconds to wait for the cluster's address to answer before naming it unreachable.
CONNECT_SECONDS = 5.0


def strip_colours(text: str) -> str:
    """``text`` without terminal colour codes (Ray colours the names in its errors)."""
    return _ANSI.sub("", text)


class RemoteStageError(StageError):
    """A stage failed in a Ray task; the message names the error and the node.

    Attributes:
        remote_traceback: the traceback on the node ("" when Ray sent none).
    """

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback
        if remote_traceback:
            self.add_note(f"Traceback on the node:\n{remote_traceback.rstrip()}")


def _described(error: BaseException) -> str:
    if isinstance(error, BayesflowError):
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def remote_error(error: BaseException) -> BaseException:
    """The error a stage's Ray task ended with, said plainly.

    A ``RayTaskError`` becomes a :class:`RemoteStageError` naming the original exception's
    type and message and the node (IP, pid); Ray's own errors (a worker or node that died,
    an object lost) name the node too; anything else is returned as it is.
    """
    try:
        from ray.exceptions import RayError, RayTaskError
    except ImportError:  # pragma: no cover - only reached from Ray futures
        return error
    if isinstance(error, RayTaskError):
        # Ray raises a class derived from both RayTaskError and the cause's class, whose
        # attributes are the cause's: the node and the traceback are in its text, coloured.
        cause = error.__dict__.get("cause")
        text = strip_colours(str(error)).strip()
        head, _, remote = text.partition("\n")
        found = _WHERE.search(head)
        where = f" (on node {found['ip']}, pid {found['pid']})" if found else ""
        message = _described(cause) if isinstance(cause, BaseException) else text.splitlines()[-1]
        first, newline, rest = message.partition("\n")  # the node on the line shown first
        return RemoteStageError(f"{first}{where}{newline}{rest}", remote)
    if isinstance(error, RayError):
        text = strip_colours(str(error)).strip()
        return RemoteStageError(f"{type(error).__name__}: {text}")
    return error


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    """Raise :class:`~bayesflow.errors.ClusterError` unless ``address`` (``HOST:PORT`` or
    ``ray://HOST:PORT``; ``auto`` and ``local`` are left to Ray) accepts a TCP connection
    within ``seconds``."""
    if address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(
            f"execution.address {address!r} is not HOST:PORT or ray://HOST:PORT "
            "(e.g. 10.0.0.5:6379 on a cluster node, ray://10.0.0.5:10001 from outside)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
            pass
    except OSError as error:
        reason = (f"no answer in {seconds:g} s" if isinstance(error, TimeoutError)
                  else error.strerror or str(error))
        raise ClusterError(
            f"execution.address {address!r}: nothing answers at {host}:{port} ({reason}); "
            "start the cluster (`ray start --head`) or correct the address"
        ) from None


# Ray's own task options among a stage's resources; any other name is a custom resource.
TASK_OPTIONS = frozenset({"num_cpus", "num_gpus", "memory"})


def task_options(resources: dict[str, float]) -> dict[str, Any]:
    """Ray task options from one ``execution.resources`` entry: ``num_cpus``, ``num_gpus``
    and ``memory`` as they are, any other name a custom resource of the cluster's nodes
    (``ray start --resources='{"big_memory": 1}'``)."""
    options: dict[str, Any] = {name: value for name, value in resources.items() if name in TASK_OPTIONS}
    custom = {name: value for name, value in resources.items() if name not in TASK_OPTIONS}
    if custom:
        options["resources"] = custom
    return options


class RayExecutor:
    """Ray tasks on a local Ray instance or the cluster at ``address``.

    Each method or stage kind may ask for resources, e.g.
    ``{"fit": {"num_cpus": 1, "num_gpus": 0}}`` (a method's entry wins over its kind's).

    Attributes:
        placements: where each stage it computed ran (see
            :class:`~bayesflow.dag.transfer.PackedResult`), by stage name.
    """

    accepts_uncacheable = False
    driver_kinds = frozenset({"report"})

    def __init__(
        self, run_stage: Any, address: str | None = None,
        resources: dict[str, dict[str, float]] | None = None, workers: int | None = None,
        retries: int = 3,
    ) -> None:
        """Connect to (or start) Ray and put ``run_stage`` in its object store.

        Args:
            run_stage: computes one stage (picklable).
            address: a Ray cluster address; None starts a local Ray with ``workers`` CPUs.
            resources: Ray task options per method name or stage kind.
            workers: stages at once; on a cluster, 1 or None means one per cluster CPU.
            retries: times Ray reruns a task whose worker or node died.

        Raises:
            MissingDependencyError: Ray (the extra ``bayesflow-workflows[ray]``) is missing.
            ClusterError: nothing answers at ``address``, or Ray cannot connect to it.
        """
        from bayesflow.errors import MissingDependencyError

        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError(
                "execution.executor: ray needs Ray; install it with "
                "`pip install 'bayesflow-workflows[ray]'`"
            ) from exc
        self.ray = ray
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                check_reachable(address)
                options["address"] = address
            elif workers:
                options["num_cpus"] = workers
            from bayesflow.stopping import restore_after

            try:
                # ray.init installs a SIGTERM handler (sys.exit) that would skip the cleanup.
                restore_after(ray.init, **options)
            except (ConnectionError, RuntimeError, ValueError) as error:
                where = f"the Ray cluster at {address!r}" if address else "a local Ray"
                raise ClusterError(
                    f"execution.address: cannot connect to {where}: "
                    f"{strip_colours(str(error)).strip()}. Check that a Ray head listens there; "
                    "a head started with token authentication needs RAY_AUTH_MODE=token and "
                    "its token (~/.ray/auth_token, or RAY_AUTH_TOKEN) in the driver's environment"
                ) from None
        if workers and (workers > 1 or not address):
            self.workers = int(workers)
        else:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.runner = ray.put(run_stage)  # the spec and the data: once per run
        self.resources = resources or {}
        self.placements: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, Any] = {}  # entry key -> its packed entry in the store
        self._tasks: dict[Future[dict[str, Any]], Any] = {}

        @ray.remote(max_retries=retries)
        def run_remote(runner: Any, stage: Stage, names: list[str], *packed: Any) -> PackedResult:
            return run_packed(runner, stage, dict(zip(names, packed)))

        self.remote = run_remote

    def _input(self, entry: Entry) -> Any:
        """The object reference of ``entry`` packed, put into the store on first use."""
        if entry.key not in self._inputs:
            self._inputs[entry.key] = self.ray.put(pack_entry(entry))
        return self._inputs[entry.key]

    def submit(self, stage: Stage, inputs: dict[str, Entry], staging: Path) -> Future[dict[str, Any]]:
        """Start ``stage`` as a Ray task with its method's or kind's resources; when it
        returns, write its files into ``staging`` (here, on the driver)."""
        options = task_options(self.resources.get(stage.method or stage.kind, self.resources.get(stage.kind, {})))
        task = self.remote.options(**options) if options else self.remote
        references = [self._input(entry) for entry in inputs.values()]
        reference = task.remote(self.runner, stage, list(inputs), *references)
        result: Future[dict[str, Any]] = Future()
        result.set_running_or_notify_cancel()
        self._tasks[result] = reference

        def settle(done: Future[PackedResult]) -> None:
            self._tasks.pop(result, None)
            try:
                packed = done.result()
                unpack_files(packed.files, staging)
            except BaseException as error:  # the stage's failure is the future's  # noqa: BLE001
                try:
                    error = remote_error(error)
                finally:  # the future is settled whatever happens
                    result.set_exception(error)
                return
            self.placements[stage.name] = packed.placement
            result.set_result(packed.values)

        reference.future().add_done_callback(settle)
        return result

    def shutdown(self, cancel: bool = False) -> None:
        """With ``cancel``, cancel the tasks in flight; shut Ray down if this executor
        started it (or connected to the cluster)."""
        if cancel:
            for reference in list(self._tasks.values()):
                # A task already finished, or a cluster already gone, has nothing to cancel.
                with contextlib.suppress(Exception):
                    self.ray.cancel(reference, force=True)
        self._inputs.clear()
        if self.owns_ray:
            self.ray.shutdown()
