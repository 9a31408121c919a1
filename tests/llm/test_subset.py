"""The trainable subset of a language model: values and gradients of the problem over the
trainable tensors only against a plain torch/peft forward and a per-chain loop; the frozen
weights are not copied; a LoRA target or glob that names nothing is refused."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from torch.nn import functional

from bayesflow.engines.gradient import chain_gradient
from bayesflow.errors import SpecError
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem, check_window
from bayesflow.priors import diag_normal
from tests.llm.conftest import tiny
from tests.numerics import reordered

LENGTH, SCORED, WINDOWS = 12, 4, 5
SUBSETS = {
    "lora_llama": tiny(),
    "last_layer_llama": tiny(trainable={"parameters": ["model.layers.1.*"]}),
    "lora_gpt2": tiny("gpt2"),
    "last_layer_gpt2": tiny("gpt2", trainable={"parameters": ["transformer.h.1.*"]}),
}


def data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    windows = torch.randint(0, 256, (WINDOWS, LENGTH), generator=torch.Generator().manual_seed(seed))
    return windows, windows[:, LENGTH - SCORED :]


def plain_loss(model, names, params, inputs, targets, prior_variance, num_data):
    """The per-token log posterior by the model itself: its tensors set in place, its own
    forward, the loss written out by hand."""
    values = dict(model.named_parameters())
    offset = 0
    with torch.no_grad():
        for name in names:
            size = values[name].numel()
            values[name].copy_(params[offset : offset + size].view_as(values[name]))
            offset += size
    logits = model(inputs, use_cache=False).logits[:, LENGTH - SCORED - 1 : LENGTH - 1]
    log_lik = -functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
    count = sum(values[n].numel() for n in names)
    log_prior = sum(-0.5 * values[n].square().sum() / prior_variance for n in names)
    log_prior = log_prior - 0.5 * count * math.log(2 * math.pi * prior_variance)
    return log_lik + log_prior / num_data, [values[n] for n in names]


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_values_and_gradients_match_a_plain_forward_and_a_chain_loop(subset: str) -> None:
    torch.manual_seed(0)
    model, names = build_causal_lm(SUBSETS[subset])
    assert names and all(("lora_" in n) == subset.startswith("lora") for n in names)
    num_data = WINDOWS * SCORED
    problem = build_lm_problem(model, names, diag_normal(0.5), num_data, SCORED)
    chains = torch.stack([problem.init_params(torch.Generator().manual_seed(s)) for s in range(3)])
    chains = chains + 0.05 * torch.randn_like(chains)  # LoRA's B off zero: gradients reach A
    batch = data()
    gradients, values = chain_gradient(problem, 1.0)(chains, batch)
    for k in range(3):
        # a per-chain loop through the same problem (one chain: no vmap)
        one_grad, one_value = chain_gradient(problem, 1.0)(chains[k : k + 1], batch)
        torch.testing.assert_close(values[k], one_value[0], **reordered(torch.float32, 256 * LENGTH))
        torch.testing.assert_close(gradients[k], one_grad[0], **reordered(torch.float32, 256 * LENGTH))
        # the model's own forward with the tensors set in place, and autograd
        loss, leaves = plain_loss(model, names, chains[k], *batch, 0.5, num_data)
        expected = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, leaves)])
        torch.testing.assert_close(values[k], loss.detach(), **reordered(torch.float32, 256 * LENGTH))
        torch.testing.assert_close(gradients[k], expected, **reordered(torch.float32, 256 * LENGTH, scale=float(expected.abs().max())))


@pytest.mark.slow
def test_frozen_weights_are_held_once() -> None:
    torch.manual_seed(0)
    model, names = build_causal_lm(SUBSETS["lora_llama"])
    frozen = {n: p.data_ptr() for n, p in model.named_parameters() if n not in names}
    frozen_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n not in names)
    before = live_storages()
    # without the kept trunk: its hidden states are activations of the windows, not weights
    problem = build_lm_problem(model, names, diag_normal(1.0), 20, SCORED, share_trunk=False)
    start = problem.init_params(torch.Generator().manual_seed(0))
    problem.forward(start, data()[0])
    added = sum(size for ptr, size in live_storages().items() if ptr not in before)
    assert problem.module is model  # type: ignore[attr-defined]
    assert {n: p.data_ptr() for n, p in model.named_parameters() if n not in names} == frozen
    # the problem's own tensors: the trainable start and the prior's vectors, a few × d floats
    assert added <= 8 * problem.dimension * 4
    assert 8 * problem.dimension * 4 < frozen_bytes / 10


def live_storages() -> dict[int, int]:
    gc.collect()
    found = {}
    for item in gc.get_objects():
        if isinstance(item, torch.Tensor) and item.device.type == "cpu":
            try:
                storage = item.untyped_storage()
                found[storage.data_ptr()] = storage.nbytes()
            except RuntimeError:
                # A fake or functional tensor that torch.compile left behind in this
                # process (another test's): it holds no memory.
                continue
    return found


def test_lora_target_and_glob_that_name_nothing_list_what_exists() -> None:
    with pytest.raises(SpecError, match=r"\['qq_proj'\] name no linear module.*k_proj.*q_proj"):
        build_causal_lm(tiny(trainable={"lora": {"target_modules": ["q_proj", "qq_proj"]}}))
    with pytest.raises(SpecError, match=r"layers: \[2\] out of range; the model has 2"):
        build_causal_lm(tiny(trainable={"lora": {"layers": [2]}}))
    with pytest.raises(SpecError, match=r"match no parameter tensor.*model.layers.1.mlp.up_proj.weight"):
        build_causal_lm(tiny(trainable={"parameters": ["model.layers.7.*"]}))


def test_lora_starts_at_the_base_model_with_chains_apart() -> None:
    model, names = build_causal_lm(SUBSETS["lora_llama"])
    problem = build_lm_problem(model, names, diag_normal(1.0), 20, SCORED)
    first, second = (problem.init_params(torch.Generator().manual_seed(s)) for s in (0, 1))
    assert not torch.equal(first, second)
    inputs = data()[0]
    base = model(inputs, use_cache=False).logits[:, LENGTH - SCORED - 1 : LENGTH - 1]
    # B = 0: the adapted model is the base model (exactly: the adapter adds zero)
    with model.disable_adapter():
        plain = model(inputs, use_cache=False).logits[:, LENGTH - SCORED - 1 : LENGTH - 1]
    torch.testing.assert_close(problem.forward(first, inputs), plain, **reordered(torch.float32, 256))
    torch.testing.assert_close(base, plain, rtol=0, atol=0)


@pytest.mark.parametrize("trainable", [None, {"parameters": ["model.layers.1.*"]}])
def test_bfloat16_frozen_weights_with_a_float32_state(trainable: dict | None) -> None:
    torch.manual_seed(0)
    config = tiny(dtype="bfloat16") if trainable is None else tiny(dtype="bfloat16", trainable=trainable)
    model, names = build_causal_lm(config)
    problem = build_lm_problem(model, names, diag_normal(1.0), WINDOWS * SCORED, SCORED)
    chains = torch.stack([problem.init_params(torch.Generator().manual_seed(s)) for s in range(3)])
    chains = chains + 0.05 * torch.randn_like(chains)
    gradients, values = chain_gradient(problem, 1.0)(chains, data())
    assert chains.dtype == gradients.dtype == values.dtype == torch.float32
    assert gradients.abs().max() > 0
    for k in range(3):
        one_grad, one_value = chain_gradient(problem, 1.0)(chains[k : k + 1], data())
        scale = float(gradients[k].abs().max())
        torch.testing.assert_close(gradients[k], one_grad[0], **reordered(torch.bfloat16, 256 * LENGTH, scale=scale))
        torch.testing.assert_close(values[k], one_value[0], **reordered(torch.bfloat16, 256 * LENGTH))


def test_windows_longer_than_the_context_are_refused() -> None:
    model, _ = build_causal_lm(tiny(context=64))
    check_window(model, 64, 8)
    with pytest.raises(SpecError, match="windows of 65 tokens exceed the model's context of 64"):
        check_window(model, 65, 8)
    with pytest.raises(SpecError, match="scored: 64 must be at least 1 and below"):
        check_window(model, 64, 64)
    gpt2, _ = build_causal_lm(tiny("gpt2", context=32))
    with pytest.raises(SpecError, match="context of 32"):
        check_window(gpt2, 40, 8)
