"""KFAC (expand, empirical Fisher) over a tiny Llama's LoRA adapters and linear layers:
the factors against the exact per-token Fisher (one scored token, one row: exact) and
against a per-position closed form built from the adapters' own inputs and output
gradients; the Kronecker posterior's variances against a dense inverse at two
temperatures under both conventions; the frozen weights untouched and never copied."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev

from bayesflow.engines.kfac import factor_size, unpack
from bayesflow.errors import StageError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.kfac import lm_kfac_factors, lm_kfac_layers, lm_kfac_posterior
from bayesflow.llm.problem import build_lm_problem
from bayesflow.priors import diag_normal
from bayesflow.temperature import Tempering
from tests.llm.conftest import tiny
from tests.numerics import reordered

PRIOR_VARIANCE = 0.5
LAST_LAYER = {"parameters": ["model.layers.1.self_attn.*", "model.layers.1.mlp.*"]}


def setup(windows: int, length: int, scored: int, trainable: dict | None = None,
          prior_variance: float = PRIOR_VARIANCE, family: str = "llama",
          dtype: str = "float32") -> tuple:
    """A tiny model's problem, parameters off the LoRA start (B ≠ 0), and random windows."""
    torch.manual_seed(0)
    config = tiny(family, dtype=dtype)
    if trainable is not None:
        config["trainable"] = trainable
    model, names = build_causal_lm(config)
    problem = build_lm_problem(model, names, diag_normal(prior_variance), windows * scored, scored)
    tokens = torch.randint(0, 256, (windows, length), generator=torch.Generator().manual_seed(2))
    start = problem.init_params(torch.Generator().manual_seed(0))
    params = start + 0.1 * torch.randn(start.shape, generator=torch.Generator().manual_seed(3))
    return model, problem, params, tokens, tokens[:, length - scored :]


def kronecker(factors: tuple) -> torch.Tensor:
    """G ⊗ A/R, the weight block's curvature in row-major (out, in) order."""
    inputs, outputs, rows = factors
    return torch.kron(outputs, inputs / rows)


@pytest.mark.parametrize(("family", "trainable"), [("llama", None), ("llama", LAST_LAYER), ("gpt2", None)],
                         ids=["lora", "last_layer", "gpt2_lora"])
def test_one_scored_token_factors_are_its_exact_fisher(family: str, trainable: dict | None) -> None:
    """One window of two tokens, its last scored: one row, where G ⊗ A is the token's
    exact empirical Fisher g gᵀ over every layer's weight (and G over its bias)."""
    _, problem, params, tokens, targets = setup(1, 2, 1, trainable, family=family)
    layers = lm_kfac_layers(problem)
    packed = lm_kfac_factors(problem, layers, params, tokens, targets)

    def log_p(flat: torch.Tensor) -> torch.Tensor:
        return problem.log_likelihood(problem.forward(flat, tokens), targets).sum()

    gradient = jacrev(log_p)(params).detach()
    checked = 0
    for layer, factors in zip(layers.layers, unpack(layers, packed)):
        assert float(factors[2]) == 1.0  # one row: position 0 of the window
        blocks = [(layer.weight, kronecker(factors))]
        if layer.bias is not None:
            blocks.append((layer.bias, factors[1]))
        for index, found in blocks:
            g = gradient[index.reshape(-1)]
            expected = torch.outer(g, g)
            scale = max(float(expected.abs().max()), float(found.abs().max()), 1e-30)
            torch.testing.assert_close(found, expected, **reordered(torch.float32, 64, scale=scale))
            checked += float(expected.abs().max()) > 0
    # Attention over one position ignores its query, so q_proj's adapters have no
    # gradient here (both sides zero); the value and MLP paths have one.
    assert checked >= 2


def closed_form(model, problem, params, tokens, targets) -> list[tuple]:
    """(Σ aaᵀ, G, R) per layer from the adapters' inputs and output gradients recorded on
    the full windows (the problem's own forward), rows = positions 0 … L − 2."""
    layers = lm_kfac_layers(problem)
    records = {}
    handles = [layer.module.register_forward_hook(
        lambda module, args, out, name=layer.name: records.__setitem__(name, (args[0].detach(), out)))
        for layer in layers.layers]
    leaf = params.detach().requires_grad_(True)
    total = problem.log_likelihood(problem.forward(leaf, tokens), targets).sum()
    for handle in handles:
        handle.remove()
    names = [layer.name for layer in layers.layers]
    grads = torch.autograd.grad(total, [records[name][1] for name in names] + [leaf])
    result = []
    for layer, grad in zip(layers.layers, grads[:-1]):
        a = records[layer.name][0][:, :-1].reshape(-1, layer.shape[1]).float()
        g = grad[:, :-1].reshape(-1, layer.shape[0]).float()
        assert float(grad[:, -1].abs().max()) == 0.0  # the last position reaches no scored token
        # The rows lose nothing: Σ_rows g aᵀ is the weight's full gradient.
        expected = grads[-1][layer.weight.reshape(-1)].reshape(layer.shape)
        layer_dtype = records[layer.name][0].dtype  # the weight's gradient is summed in it
        torch.testing.assert_close(g.T @ a, expected, **reordered(layer_dtype, 64, scale=float(expected.abs().max())))
        result.append((a.T @ a, g.T @ g, float(a.shape[0])))
    return result


@pytest.mark.parametrize(("trainable", "dtype"), [(None, "float32"), (LAST_LAYER, "float32"),
                                                  (LAST_LAYER, "bfloat16")],
                         ids=["lora", "last_layer", "last_layer_bf16"])
def test_factors_match_the_per_position_closed_form(trainable: dict | None, dtype: str) -> None:
    """Several windows, several scored tokens: the expand factors over positions 0 … L − 2,
    and the same sums from batches of two windows. With bfloat16 layers the factors are
    float32 sums of their bfloat16 inputs and gradients."""
    windows, length, scored = 4, 8, 3
    model, problem, params, tokens, targets = setup(windows, length, scored, trainable, dtype=dtype)
    layers = lm_kfac_layers(problem)
    packed = lm_kfac_factors(problem, layers, params, tokens, targets)
    batched = lm_kfac_factors(problem, layers, params, tokens, targets, batch_size=2)
    scale = float(packed.abs().max())
    torch.testing.assert_close(batched, packed, **reordered(torch.float32, 64, scale=scale))
    for found, expected in zip(unpack(layers, packed), closed_form(model, problem, params, tokens, targets)):
        assert float(found[2]) == expected[2] == windows * (length - 1)
        for mine, theirs in zip(found[:2], expected[:2]):
            assert float(theirs.abs().max()) > 0
            torch.testing.assert_close(mine, theirs, **reordered(torch.float32, 64, scale=float(theirs.abs().max())))


@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize("convention", ["posterior", "likelihood"])
def test_posterior_variance_is_t_over_kronecker_plus_prior(temperature: float, convention: str) -> None:
    """The Kronecker posterior's marginal variances are the diagonal of the dense
    ``T · (G ⊗ A/R + c/σ²)⁻¹`` of every block (c = 1 or T by the convention); the prior
    is wide (σ² = 100) so that the data's curvature moves the variances."""
    prior_variance = 100.0
    _, problem, params, tokens, targets = setup(3, 6, 2, prior_variance=prior_variance)
    layers = lm_kfac_layers(problem)
    packed = lm_kfac_factors(problem, layers, params, tokens, targets)
    tempering = Tempering(temperature, problem.num_data, convention)  # type: ignore[arg-type]
    variance = lm_kfac_posterior(problem, layers, packed, tempering).variance(problem.dimension, params)
    prior_weight = 1.0 if convention == "posterior" else temperature
    bound = temperature * prior_variance / prior_weight  # the prior's own variance
    ratios = []
    for layer, factors in zip(layers.layers, unpack(layers, packed)):
        curvature = kronecker(factors).double()
        precision = curvature + prior_weight / prior_variance * torch.eye(curvature.shape[0], dtype=torch.float64)
        expected = (temperature * torch.linalg.inv(precision).diagonal()).float()
        found = variance[layer.weight.reshape(-1)]
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-6 * bound)
        assert float(found.max()) <= bound * (1 + 1e-5)  # the prior bounds each variance
        ratios.append(float(found.min()) / bound)
    assert min(ratios) < 0.5  # and the data shrink some well below it


def test_frozen_weights_are_neither_copied_nor_touched() -> None:
    """The layers are the model's own adapter modules, the packed factors hold only the
    trainable layers' sizes, and every frozen weight keeps its storage, value and grad."""
    model, problem, params, tokens, targets = setup(2, 6, 2)
    frozen = {name: (value.data_ptr(), value.detach().clone())
              for name, value in model.named_parameters() if not value.requires_grad}
    layers = lm_kfac_layers(problem)
    modules = dict(model.named_modules())
    assert all(modules[layer.name] is layer.module for layer in layers.layers)
    assert all(".lora_A." in layer.name + "." or ".lora_B." in layer.name + "." for layer in layers.layers)
    packed = lm_kfac_factors(problem, layers, params, tokens, targets)
    trainable = [value for value in model.parameters() if value.requires_grad]
    assert packed.numel() == factor_size(layers) == sum(v.shape[0] ** 2 + v.shape[1] ** 2 + 1 for v in trainable)
    for name, value in model.named_parameters():
        if name in frozen:
            pointer, before = frozen[name]
            assert value.data_ptr() == pointer and value.grad is None
            assert torch.equal(value.detach(), before)


def test_a_trainable_tensor_outside_linear_layers_is_refused() -> None:
    _, problem, *_ = setup(1, 4, 1, {"parameters": ["model.layers.1.*"]})
    with pytest.raises(StageError, match="input_layernorm"):
        lm_kfac_layers(problem)
