"""The frozen trunk computed once: values and gradients of K chains under ``vmap`` equal
the whole forward's, for LoRA and a glob on the last layer of a llama and a gpt2; a
subset that starts in layer 0 shares nothing; the trunk is reused for the same windows."""

from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from bayesflow.engines.base import ChainBatch
from bayesflow.engines.gradient import chain_gradient
from bayesflow.llm import build_causal_lm
from bayesflow.llm.problem import build_lm_problem
from bayesflow.llm.trunk import split_trunk
from bayesflow.priors import diag_normal
from tests.llm.conftest import tiny
from tests.numerics import reordered

LENGTH, SCORED, WINDOWS, CHAINS, LAYERS = 12, 4, 5, 3, 3
SUBSETS = {
    "lora_llama": tiny(layers=LAYERS, trainable={"lora": {
        "r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"], "layers": [-1]}}),
    "last_layer_llama": tiny(layers=LAYERS, trainable={"parameters": ["model.layers.2.*"]}),
    "lora_gpt2": tiny("gpt2", layers=LAYERS, trainable={"lora": {
        "r": 2, "alpha": 4, "target_modules": ["c_attn"], "layers": [-1]}}),
    "last_layer_gpt2": tiny("gpt2", layers=LAYERS, trainable={"parameters": ["transformer.h.2.*"]}),
}
FIRST_LAYER = {
    "llama": tiny(layers=LAYERS, trainable={"parameters": ["model.layers.0.*", "model.layers.2.*"]}),
    "gpt2": tiny("gpt2", layers=LAYERS, trainable={"lora": {
        "r": 2, "alpha": 4, "target_modules": ["c_attn"], "layers": [0]}}),
    "embeddings": tiny(layers=LAYERS, trainable={"parameters": ["model.embed_tokens.*"]}),
}
# The largest sum: a logit over the hidden width and the log-softmax over the vocabulary,
# per window and position.
TERMS = 256 * LENGTH


@pytest.fixture(autouse=True)
def _no_kept_windows() -> None:
    """Each test starts with nothing kept in this process (trunk._LAST)."""
    from bayesflow.llm.trunk import forget_kept

    forget_kept()


def problems(subset: str) -> tuple:
    """The problem with the trunk shared and the same model's whole-forward problem."""
    torch.manual_seed(0)
    model, names = build_causal_lm(SUBSETS[subset])
    shared = build_lm_problem(model, names, diag_normal(0.5), WINDOWS * SCORED, SCORED)
    whole = build_lm_problem(model, names, diag_normal(0.5), WINDOWS * SCORED, SCORED, share_trunk=False)
    chains = torch.stack([shared.init_params(torch.Generator().manual_seed(s)) for s in range(CHAINS)])
    chains = chains + 0.05 * torch.randn_like(chains)  # LoRA's B off zero: gradients reach A
    windows = torch.randint(0, 256, (WINDOWS, LENGTH), generator=torch.Generator().manual_seed(1))
    return shared, whole, chains, (windows, windows[:, LENGTH - SCORED :])


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_the_trunk_starts_at_the_last_layer(subset: str) -> None:
    """A last-layer subset or LoRA on the last layer shares layers 0 and 1."""
    model, names = build_causal_lm(SUBSETS[subset])
    trunk = split_trunk(model, names)
    assert trunk is not None and trunk.start == LAYERS - 1


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_shared_values_equal_the_whole_forward_under_vmap(subset: str) -> None:
    """K chains' logits (vmapped over the parameters) equal the whole forward's."""
    shared, whole, chains, (windows, _) = problems(subset)
    with torch.no_grad():
        expected = vmap(whole.forward, in_dims=(0, None))(chains, windows)
        found = vmap(shared.forward, in_dims=(0, None))(chains, windows)
        again = vmap(shared.forward, in_dims=(0, None))(chains, windows)  # the kept trunk
        every = vmap(lambda p: shared.logits(p, windows, 0))(chains)
    assert found.shape == (CHAINS, WINDOWS, SCORED, 256)
    torch.testing.assert_close(found, expected, **reordered(torch.float32, TERMS))
    torch.testing.assert_close(again, found, rtol=0, atol=0)
    torch.testing.assert_close(every[..., -SCORED - 1 : -1, :], expected, **reordered(torch.float32, TERMS))


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_shared_gradients_equal_the_whole_forward(subset: str) -> None:
    """The chains' gradients and values, shared windows and one batch per chain, equal the
    whole forward's (one chain too, which runs without vmap)."""
    shared, whole, chains, batch = problems(subset)
    own = ChainBatch(batch[0].expand(CHAINS, -1, -1), batch[1].expand(CHAINS, -1, -1))
    for data in (batch, own):
        grads, values = chain_gradient(shared, 1.0)(chains, data)
        expected_grads, expected_values = chain_gradient(whole, 1.0)(chains, data)
        scale = float(expected_grads.abs().max())
        assert scale > 0
        torch.testing.assert_close(values, expected_values, **reordered(torch.float32, TERMS))
        torch.testing.assert_close(grads, expected_grads, **reordered(torch.float32, TERMS, scale=scale))
    one, _ = chain_gradient(shared, 1.0)(chains[:1], batch)
    torch.testing.assert_close(one[0], chain_gradient(whole, 1.0)(chains[:1], batch)[0][0],
                               **reordered(torch.float32, TERMS, scale=scale))


@pytest.mark.parametrize("subset", sorted(FIRST_LAYER))
def test_a_subset_from_layer_zero_or_the_embeddings_shares_nothing(subset: str) -> None:
    """Trainable tensors in layer 0 or the embeddings: no trunk, the whole forward."""
    model, names = build_causal_lm(FIRST_LAYER[subset])
    assert split_trunk(model, names) is None


def test_each_window_runs_through_the_trunk_once() -> None:
    """The first layers run once per window: for K chains, for a loop over members, for
    the same windows in another tensor or order (the next epoch's minibatches), and again
    only for a window whose tokens changed."""
    shared, _, chains, (windows, _) = problems("last_layer_llama")
    calls: list[int] = []
    layer = shared.module.model.layers[0]  # type: ignore[union-attr]
    handle = layer.register_forward_hook(lambda _m, args, _o: calls.append(int(args[0].shape[0])))
    try:
        with torch.no_grad():
            for _ in range(2):
                vmap(shared.forward, in_dims=(0, None))(chains, windows)
            for member in chains:  # a loop over members reads the kept windows too
                shared.forward(member, windows)
            assert calls == [WINDOWS]
            shared.forward(chains[0], windows.flip(0).clone())  # the next epoch's order
            shared.forward(chains[0], windows[1:3])  # a minibatch of kept windows
            assert calls == [WINDOWS]
            windows[0, 0] = (windows[0, 0] + 1) % 256  # one window changed: it alone runs
            shared.forward(chains[0], windows)
            assert calls == [WINDOWS, 1]
    finally:
        handle.remove()


def test_batches_per_chain_share_the_kept_windows() -> None:
    """A ChainBatch (each chain its own minibatch, as parallel SGHMC draws them) runs each
    distinct window through the trunk once, whichever chains hold it, and again never: its
    values and gradients equal the whole forward's."""
    shared, whole, chains, (windows, targets) = problems("last_layer_llama")
    order = torch.stack([torch.randperm(WINDOWS, generator=torch.Generator().manual_seed(k))[:3]
                         for k in range(CHAINS)])  # (K, 3): chains overlap in their windows
    own = ChainBatch(windows[order], targets[order])
    calls: list[int] = []
    layer = shared.module.model.layers[0]  # type: ignore[union-attr]
    handle = layer.register_forward_hook(lambda _m, args, _o: calls.append(int(args[0].shape[0])))
    try:
        grads, values = chain_gradient(shared, 1.0)(chains, own)
        distinct = len(set(order.flatten().tolist()))
        assert calls == [distinct] and shared_trunk(shared).computed == distinct
        chain_gradient(shared, 1.0)(chains, ChainBatch(windows[order.flip(0)], targets[order.flip(0)]))
        assert calls == [distinct]  # the next epoch: every window read back
    finally:
        handle.remove()
    expected_grads, expected_values = chain_gradient(whole, 1.0)(chains, own)
    scale = float(expected_grads.abs().max())
    torch.testing.assert_close(values, expected_values, **reordered(torch.float32, TERMS))
    torch.testing.assert_close(grads, expected_grads, **reordered(torch.float32, TERMS, scale=scale))


@pytest.mark.parametrize("subset", ["lora_llama", "last_layer_gpt2"])
def test_the_token_fisher_reads_the_kept_windows_and_equals_the_whole_forward(subset: str) -> None:
    """The per-token empirical Fisher (windows under ``vmap``, tokens under ``jacrev``) runs
    each window through the trunk once, reads it back the next time, and equals the whole
    forward's Fisher."""
    from bayesflow.llm.curvature import token_diagonal_fisher

    shared, whole, chains, batch = problems(subset)
    found = token_diagonal_fisher(shared, chains[0], batch)
    assert shared_trunk(shared).computed == WINDOWS
    again = token_diagonal_fisher(shared, chains[0], batch)
    assert shared_trunk(shared).computed == WINDOWS  # every window read back
    expected = token_diagonal_fisher(whole, chains[0], batch)
    scale = float(expected.abs().max())
    assert scale > 0
    torch.testing.assert_close(found, expected, **reordered(torch.float32, TERMS, scale=scale))
    torch.testing.assert_close(again, found, rtol=0, atol=0)


def shared_trunk(problem):  # type: ignore[no-untyped-def]
    """The trunk the problem's logits read."""
    import inspect

    return inspect.getclosurevars(problem.logits).nonlocals["trunk"]


def test_kept_windows_give_the_values_of_the_whole_forward_in_any_order() -> None:
    """Logits from kept windows, in another order and mixed with new ones, equal the whole
    forward's."""
    shared, whole, chains, (windows, _) = problems("lora_llama")
    other = torch.randint(0, 256, (2, LENGTH), generator=torch.Generator().manual_seed(7))
    mixed = torch.cat([windows[[3, 0]], other, windows[[0]]])
    with torch.no_grad():
        vmap(shared.forward, in_dims=(0, None))(chains, windows)  # keeps the windows
        found = vmap(shared.forward, in_dims=(0, None))(chains, mixed)
        expected = vmap(whole.forward, in_dims=(0, None))(chains, mixed)
    torch.testing.assert_close(found, expected, **reordered(torch.float32, TERMS))


def test_no_budget_keeps_nothing_and_computes_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget too small for one window the trunk runs in every call (same values)."""
    monkeypatch.setenv("BAYESFLOW_MEMORY_LIMIT", "100")
    shared, whole, chains, (windows, _) = problems("last_layer_gpt2")
    calls: list[int] = []
    layer = shared.module.transformer.h[0]  # type: ignore[union-attr]
    handle = layer.register_forward_hook(lambda *_: calls.append(1))
    try:
        with torch.no_grad():
            first = shared.forward(chains[0], windows)
            second = shared.forward(chains[0], windows)
    finally:
        handle.remove()
    assert len(calls) == 2
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    torch.testing.assert_close(first, whole.forward(chains[0], windows).detach(), **reordered(torch.float32, TERMS))


@pytest.mark.parametrize("subset", ["last_layer_llama", "lora_gpt2"])
def test_logits_at_chosen_positions_are_those_of_every_position(subset: str) -> None:
    """``logits(..., at=(windows, positions))`` equals indexing every kept position's
    logits, shared trunk or whole forward, under vmap over members."""
    shared, whole, chains, (windows, _) = problems(subset)
    rows, places = torch.tensor([0, 0, 3, 4]), torch.tensor([1, 5, 0, 5])
    with torch.no_grad():
        every = vmap(lambda p: whole.logits(p, windows, 6))(chains)[:, rows, places]
        for problem in (shared, whole):
            found = vmap(lambda p, problem=problem: problem.logits(p, windows, 6, at=(rows, places)))(chains)
            assert found.shape == (CHAINS, 4, 256)
            torch.testing.assert_close(found, every, **reordered(torch.float32, TERMS))


def test_a_second_problem_over_the_same_frozen_weights_reads_the_kept_windows() -> None:
    """The next stage in a worker process (another method, seed or evaluation) builds a
    new model from the same folder: its trunk reads back what the first computed, with the
    same values; a model whose frozen weights differ computes its own."""
    from bayesflow.llm import trunk

    first, _, chains, (windows, _) = problems("last_layer_llama")
    second, whole, _, _ = problems("last_layer_llama")  # a new model, the same weights
    assert first.module is not second.module
    with torch.no_grad():
        expected = first.forward(chains[0], windows)
        kept = trunk._LAST[0]
        assert len(kept.rows) == WINDOWS
        calls: list[int] = []
        layer = second.module.model.layers[0]  # type: ignore[union-attr]
        handle = layer.register_forward_hook(lambda _m, args, _o: calls.append(int(args[0].shape[0])))
        try:
            found = second.forward(chains[0], windows)
        finally:
            handle.remove()
        assert calls == []
        torch.testing.assert_close(found, expected, rtol=0, atol=0)
        torch.testing.assert_close(found, whole.forward(chains[0], windows), **reordered(torch.float32, TERMS))
        torch.manual_seed(0)
        changed, names = build_causal_lm(SUBSETS["last_layer_llama"])
        changed.model.layers[0].mlp.up_proj.weight.add_(0.5)  # frozen weights that differ
    other = split_trunk(changed, names)
    assert other is not None and other.kept is not kept
    assert other.kept.fingerprint != kept.fingerprint and other.kept.rows == {}
