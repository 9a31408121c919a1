"""The built-in networks: output shapes, parameter names and batching over parameters."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.func import vmap

from bayesflow.errors import SpecError
from bayesflow.likelihoods import categorical
from bayesflow.models import LSTM, MODELS, build_model
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem

TINY_CNN_LSTM = {
    "name": "cnn_lstm",
    "vocabulary_size": 30,
    "embedding_size": 6,
    "filters": 5,
    "kernel_size": 3,
    "pool_size": 2,
    "hidden_size": 4,
}


@pytest.mark.parametrize(
    ("config", "inputs", "num_outputs"),
    [
        ({"name": "mlp", "hidden": [7, 5]}, torch.randn(4, 3), 2),
        ({"name": "linear"}, torch.randn(4, 3), 1),
        ({"name": "logistic"}, torch.randn(4, 3), 1),
        ({"name": "cnn"}, torch.randn(4, 64), 10),
        ({"name": "cnn", "channels": [4, 8], "kernel_size": 5}, torch.randn(4, 784), 10),
        ({"name": "cnn", "image_shape": [3, 4, 6], "channels": [2]}, torch.randn(4, 72), 3),
        (TINY_CNN_LSTM, torch.randint(0, 30, (4, 12)), 2),
    ],
    ids=["mlp", "linear", "logistic", "cnn-8x8", "cnn-28x28", "cnn-3x4x6", "cnn_lstm"],
)
def test_output_shape(config: dict, inputs: torch.Tensor, num_outputs: int) -> None:
    """Every built-in maps (n, features) to (n, outputs)."""
    model = build_model(config, inputs.shape[1], num_outputs)
    assert model(inputs).shape == (4, num_outputs)


def test_cnn_head_is_named_fc() -> None:
    """The CNN's tensors have readable names, its last layer `fc`."""
    model = build_model({"name": "cnn"}, 64, 10)
    names = [name for name, _ in model.named_parameters()]
    assert names == [
        "conv1.weight",
        "conv1.bias",
        "conv2.weight",
        "conv2.bias",
        "fc.weight",
        "fc.bias",
    ]


def test_cnn_rejects_features_that_are_not_the_image() -> None:
    """An image shape that does not hold the features says what it should be."""
    with pytest.raises(SpecError, match=r"\[1, 8, 9\] holds 72 values but the data have 64"):
        build_model({"name": "cnn", "image_shape": [1, 8, 9]}, 64, 10)
    with pytest.raises(SpecError, match="set `image_shape: \\[C, H, W\\]`"):
        build_model({"name": "cnn"}, 60, 10)


def test_cnn_rejects_more_blocks_than_the_image_allows() -> None:
    """Pooling an 8×8 image four times is refused with the largest usable depth."""
    with pytest.raises(SpecError, match="use at most 3 blocks"):
        build_model({"name": "cnn", "channels": [2, 2, 2, 2]}, 64, 10)


def test_cnn_lstm_reads_token_ids_given_as_floats() -> None:
    """Token ids from a float array give the same outputs as integer ids."""
    model = build_model(TINY_CNN_LSTM, 12, 2)
    tokens = torch.randint(0, 30, (3, 12))
    torch.testing.assert_close(model(tokens.float()), model(tokens))


def test_lstm_equals_torch_lstm() -> None:
    """The matrix-product LSTM computes nn.LSTM's last hidden state (one bias = their sum)."""
    reference = nn.LSTM(5, 4, batch_first=True)
    ours = LSTM(5, 4)
    with torch.no_grad():
        ours.weight_ih.copy_(reference.weight_ih_l0)
        ours.weight_hh.copy_(reference.weight_hh_l0)
        ours.bias.copy_(reference.bias_ih_l0 + reference.bias_hh_l0)
    inputs = torch.randn(3, 7, 5)
    _, (hidden, _) = reference(inputs)
    torch.testing.assert_close(ours(inputs), hidden[-1])


@pytest.mark.parametrize(
    "config", [TINY_CNN_LSTM, {"name": "cnn", "channels": [3]}], ids=["cnn_lstm", "cnn"]
)
def test_vmap_over_parameters_equals_a_loop(config: dict) -> None:
    """vmap over 3 flat parameter vectors gives the loop's outputs, without a fallback warning."""
    num_features = 12 if config["name"] == "cnn_lstm" else 16
    problem = build_problem(build_model(config, num_features, 2), categorical(), diag_normal(), 10)
    generator = torch.Generator().manual_seed(0)
    params = torch.stack([problem.init_params(generator) for _ in range(3)])
    if config["name"] == "cnn_lstm":
        inputs = torch.randint(0, 30, (5, num_features), generator=generator)
    else:
        inputs = torch.randn(5, num_features, generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a per-sample fallback warns; make it fail
        batched = vmap(problem.forward, in_dims=(0, None))(params, inputs)
    looped = torch.stack([problem.forward(row, inputs) for row in params])
    torch.testing.assert_close(batched, looped)


def test_registry_matches_the_spec() -> None:
    """Every model a spec can name is registered, and every registered model can be named."""
    from typing import get_args

    from bayesflow.spec.blocks import ModelSpec

    union = get_args(ModelSpec)[0]
    named = {get_args(spec.model_fields["name"].annotation)[0] for spec in get_args(union)}
    # a causal language model is built by bayesflow.llm (its frozen weights held once per
    # process, never flattened into a problem), not by the model registry
    assert "causal_lm" in named and "causal_lm" not in MODELS.names()
    assert named - {"causal_lm"} == set(MODELS.names())
