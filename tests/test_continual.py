"""Continual learning: episodes of digits, the three protocols, the spec check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bayesflow
from bayesflow.data import sklearn_digits
from bayesflow.errors import SpecError
from bayesflow.tracking import InMemoryTracker

WORKFLOW = Path(__file__).parents[1] / "workflows" / "continual.yaml"


def test_permuted_episodes_repeat_the_data_with_their_own_pixel_order() -> None:
    """Episode k holds every image once, pixels permuted; episode 0 is unpermuted."""
    plain = sklearn_digits()
    data = sklearn_digits(episodes=3)
    assert np.bincount(data.episode_train).tolist() == [len(plain.y_train)] * 3
    first = data.x_train[data.episode_train == 0]
    second = data.x_train[data.episode_train == 1]
    np.testing.assert_array_equal(first, plain.x_train)
    np.testing.assert_array_equal(np.sort(first, axis=1), np.sort(second, axis=1))
    assert not np.array_equal(first, second)


def test_class_episodes_split_the_digits() -> None:
    """`episode_kind: classes` puts consecutive digits in each episode."""
    data = sklearn_digits(episodes=5, episode_kind="classes")
    assert set(data.y_train[data.episode_train == 1].tolist()) == {2, 3}


def test_continual_needs_episodes(tmp_path: Path) -> None:
    """A continual method on data without episodes is a located spec error."""
    with pytest.raises(SpecError) as info:
        bayesflow.load(WORKFLOW, ["data.episodes=0"])
    assert any("needs data that arrive in episodes; set `data.episodes`" in p for p in info.value.problems)


@pytest.mark.slow
def test_laplace_prior_forgets_less_than_online_sgd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Carrying the Laplace posterior forward keeps earlier episodes better than online SGD."""
    monkeypatch.chdir(tmp_path)
    loaded = bayesflow.load(WORKFLOW, ["seeds=[0]", "data.episodes=3", "report.enabled=false"])
    tracker = InMemoryTracker()
    result = bayesflow.run(loaded, tracker=tracker)
    assert result.exit_code == 0, result.outcome.errors
    seen = bayesflow.histories(result.run_id, "trace/seen_average_nll", tracker=tracker)
    final = seen.loc[seen["step"] == seen["step"].max()].set_index("method")["value"]
    assert final["offline"] < final["laplace_prior"] < final["online_sgd"]
    per_episode = bayesflow.histories(result.run_id, "trace/episode_nll/0", tracker=tracker)
    assert len(per_episode) == 3 * 3  # three methods, three episodes
