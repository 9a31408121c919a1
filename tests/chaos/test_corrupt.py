"""Damaged cache entries and unusable surroundings, through the command line: every
error says what is wrong and where, and nothing finished is lost.

(A truncated ``outputs.json`` is in tests/dag/test_cache.py; a refused http store's probe
in tests/tracking/test_experiment_kind.py.)
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.helpers import CACHE, entries, fit_runs, invoke, leftovers, workflow


def remove_posterior(fit: Path) -> None:
    (fit / "posterior.npz").unlink()


def garbage_manifest(fit: Path) -> None:
    (fit / "manifest.json").write_bytes(b"\x00\xffnot json")


def truncated_posterior(fit: Path) -> None:
    path = fit / "posterior.npz"
    path.write_bytes(path.read_bytes()[:20])


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing posterior.npz": (remove_posterior, "posterior.npz is missing"),
    "garbage manifest": (garbage_manifest, "manifest.json cannot be read"),
    "truncated posterior.npz": (truncated_posterior, "posterior.npz has 20 bytes"),
}


@pytest.mark.slow  # two real runs per damage (about 9 s each): outside the fast lane
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_named_and_recomputed(damage: str, tmp_path: Path) -> None:
    workflow(tmp_path)
    assert invoke(tmp_path, "run", "spec.yaml").exit_code == 0
    fit = next(path.parent for path in (tmp_path / CACHE).glob("*/posterior.npz"))
    spoil, problem = DAMAGE[damage]
    spoil(fit)

    with pytest.warns(UserWarning, match=problem) as caught:
        result = invoke(tmp_path, "run", "spec.yaml")
    assert result.exit_code == 0, result.output
    assert any(str(fit.name) in str(warning.message) for warning in caught)
    # the damaged fit and the evaluation that reads it again; the other seed's are reused
    assert "stages: 2 ran, 2 cached, 0 failed, 0 skipped" in result.output
    assert len(entries(tmp_path)) == 4 and leftovers(tmp_path) == []
    assert (fit / "posterior.npz").stat().st_size > 20
    runs = fit_runs(tmp_path)
    assert len(runs) == 2 and all("RUNNING" not in statuses for statuses in runs.values()), runs


@pytest.mark.slow
def test_a_plan_over_a_damaged_cache_says_new_not_internal_error(tmp_path: Path) -> None:
    workflow(tmp_path)
    assert invoke(tmp_path, "run", "spec.yaml").exit_code == 0
    for path in (tmp_path / CACHE).glob("*/manifest.json"):
        path.write_text("{")
    result = invoke(tmp_path, "plan", "spec.yaml")
    assert result.exit_code == 0, result.output
    assert "4 stages: 4 new" in result.output and "internal error" not in result.output


def free_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_store_fails_the_run_at_once_and_computes_nothing(tmp_path: Path) -> None:
    workflow(tmp_path, store=False)
    uri = f"http://127.0.0.1:{free_port()}"
    result = invoke(tmp_path, "run", "spec.yaml", f"tracking.uri={uri}")
    assert result.exit_code == 1, result.output
    assert f"error: the tracking server {uri} does not answer" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert entries(tmp_path) == [] and not (tmp_path / "mlflow.db").exists()


def test_a_store_path_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    workflow(tmp_path, store=False)
    (tmp_path / "blocker").write_text("a file, not a folder")
    result = invoke(tmp_path, "run", "spec.yaml", "tracking.uri=sqlite:///blocker/mlflow.db")
    assert result.exit_code == 1, result.output
    assert "tracking store" in result.output and "blocker" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
