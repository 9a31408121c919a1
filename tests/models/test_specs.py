"""The spec side of models, priors and subsets: YAML in tmp_path, whole messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec.load import load_spec
from tests.conftest import TINY_SPEC, write

TINY_PRIOR = "prior:\n  name: diag_normal\n  variance: 1.0\n"
TINY_MODEL = "model:\n  name: mlp\n  hidden: [8]\n"


def problems(path: Path) -> list[str]:
    """The problems a spec file is rejected with."""
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return caught.value.problems


@pytest.mark.parametrize(
    "prior",
    [
        "prior:\n  name: diag_normal\n  variance: {'*.bias': 1.0, '*': 0.1}\n",
        "prior:\n  name: he_normal\n  scale: 1.0\n  bias_variance: 0.5\n",
        "prior:\n  name: laplace\n  scale: 0.2\n",
        "prior:\n  name: none\n",
    ],
    ids=["per-layer", "he_normal", "laplace", "none"],
)
def test_priors_load(tmp_path: Path, prior: str) -> None:
    """Every prior validates from YAML."""
    loaded = load_spec(write(tmp_path, TINY_SPEC.replace(TINY_PRIOR, prior)))
    assert loaded.spec.prior.name in prior


def test_per_layer_variances_keep_their_order(tmp_path: Path) -> None:
    """The pattern mapping keeps the order it was written in (first match wins)."""
    prior = "prior:\n  name: diag_normal\n  variance:\n    '2.*': 0.5\n    '*.bias': 1.0\n    '*': 0.1\n"
    loaded = load_spec(write(tmp_path, TINY_SPEC.replace(TINY_PRIOR, prior)))
    assert list(loaded.spec.prior.variance) == ["2.*", "*.bias", "*"]


def test_non_positive_variance_is_one_problem(tmp_path: Path) -> None:
    """A bad variance in a pattern mapping is reported once, at prior.variance."""
    prior = "prior:\n  name: diag_normal\n  variance: {'*.bias': 1.0, '*': 0}\n"
    path = write(tmp_path, TINY_SPEC.replace(TINY_PRIOR, prior))
    assert problems(path) == [f"{path}:13:3: prior.variance: expected positive finite variances, got 0.0"]


@pytest.mark.parametrize(
    "model",
    [
        "model:\n  name: cnn\n  channels: [4]\n",
        "model:\n  name: cnn\n  image_shape: [1, 8, 8]\n",
        "model:\n  name: cnn_lstm\n  vocabulary_size: 100\n",
        "model:\n  name: python\n  python: mypackage.networks:make_net\n  width: 3\n",
    ],
    ids=["cnn", "cnn-shape", "cnn_lstm", "python"],
)
def test_models_load(tmp_path: Path, model: str) -> None:
    """Every model validates from YAML."""
    text = TINY_SPEC.replace(TINY_MODEL, model)
    if "cnn_lstm" in model:  # a text model reads token ids: give it text data
        text = text.replace("  name: sklearn_digits\n  test_fraction: 0.5\n", "  name: imdb\n  vocab_size: 100\n")
    loaded = load_spec(write(tmp_path, text))
    assert loaded.spec.model.name in model


def test_subset_needs_a_source(tmp_path: Path) -> None:
    """`parameters` without `from` says what to add, at the `parameters` key."""
    text = TINY_SPEC.replace("    chains: 2\n", "    chains: 2\n    parameters: ['2.*']\n")
    path = write(tmp_path, text)
    assert problems(path) == [
        (
            f"{path}:29:5: methods.sghmc.parameters: inferring a subset of the parameters needs "
            "`from: <a method>` whose values fix the others; add it"
        )
    ]


def test_subset_with_a_source_loads(tmp_path: Path) -> None:
    """A last-layer Laplace (`parameters` with `from`) is a valid spec."""
    text = TINY_SPEC.replace("    from: map\n", "    from: map\n    parameters: ['2.*']\n")
    loaded = load_spec(write(tmp_path, text))
    assert loaded.spec.methods["laplace"].parameters == ["2.*"]
