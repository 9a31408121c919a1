"""Chunked passes within a memory budget: the linearised predictive and the curvature.

``BAYESFLOW_MEMORY_LIMIT`` set to a few KiB forces many chunks; the results must equal
the ones computed in one chunk (a limit of many GiB), and a limit too small for a single
row must fail with a message that names the setting.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from bayesflow.engines import curvature
from bayesflow.engines.base import Posterior, Problem, linearized_outputs
from bayesflow.engines.memory import (
    MEMORY_VARIABLE,
    RowCost,
    format_bytes,
    forward_bytes,
    memory_budget,
    parse_size,
    rows_within,
)
from bayesflow.errors import StageError
from bayesflow.likelihoods import bernoulli, categorical, gaussian
from bayesflow.models import cnn, cnn_lstm, linear, mlp
from bayesflow.priors import diag_normal
from bayesflow.problem import build_problem

UNLIMITED = "64GiB"


def _mlp() -> tuple[nn.Module, Callable[[torch.Generator], torch.Tensor], object]:
    return mlp(5, 3, hidden=[16, 8], activation="tanh"), lambda g: torch.randn(40, 5, generator=g), categorical()


def _regression() -> tuple[nn.Module, Callable[[torch.Generator], torch.Tensor], object]:
    return linear(4, 1), lambda g: torch.randn(33, 4, generator=g), gaussian()


def _cnn() -> tuple[nn.Module, Callable[[torch.Generator], torch.Tensor], object]:
    return cnn(64, 4, channels=(3, 4)), lambda g: torch.randn(12, 64, generator=g), categorical()


def _text() -> tuple[nn.Module, Callable[[torch.Generator], torch.Tensor], object]:
    model = cnn_lstm(12, 1, vocabulary_size=30, embedding_size=6, filters=4, kernel_size=3, pool_size=2,
                     hidden_size=5)
    return model, lambda g: torch.randint(0, 30, (9, 12), generator=g), bernoulli()


SHAPES = {"mlp": _mlp, "regression": _regression, "cnn": _cnn, "cnn_lstm": _text}


def _case(shape: str) -> tuple[Problem, torch.Tensor, torch.Tensor]:
    model, make_inputs, likelihood = SHAPES[shape]()
    problem = build_problem(model.double(), likelihood, diag_normal(), 10)
    generator = torch.Generator().manual_seed(0)
    params = problem.init_params(generator).double()
    inputs = make_inputs(generator)
    inputs = inputs if inputs.dtype == torch.long else inputs.double()
    return problem, params, inputs


def counting(
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], calls: list[int]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``forward`` that appends the rows of each call to ``calls``."""

    def counted(params: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        calls.append(rows.shape[0])
        return forward(params, rows)

    return counted


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_linearized_prediction_in_many_chunks_equals_one_chunk(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget that holds two samples on three rows splits the work into many chunks; the
    outputs stay those of one chunk, value for value."""
    problem, mean, inputs = _case(shape)
    posterior = Posterior(mean=mean, var=torch.full_like(mean, 1e-2))
    cost = RowCost(lambda rows: problem.forward(mean, rows), inputs)
    with torch.no_grad():
        width = problem.forward(mean, inputs[:1]).shape[-1]
    small = str(20 * inputs.shape[0] * width * 8 + cost.fixed * 7 + 2 * mean.numel() * 8 + cost.per_row * 7 * 3)
    results, chunks = {}, {}
    for limit in (UNLIMITED, small):
        monkeypatch.setenv(MEMORY_VARIABLE, limit)
        calls: list[int] = []
        counted = Problem(**{**problem.__dict__, "forward": counting(problem.forward, calls)})
        results[limit] = linearized_outputs(counted, posterior, inputs, 20, torch.Generator().manual_seed(3))
        chunks[limit] = len(calls)
    assert results[UNLIMITED].shape == (20, inputs.shape[0], results[UNLIMITED].shape[-1])
    torch.testing.assert_close(results[small], results[UNLIMITED], rtol=1e-6, atol=1e-6)
    assert chunks[small] > chunks[UNLIMITED] + 2  # the small budget did split the work


def test_linearized_prediction_names_the_setting_when_one_row_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem, mean, inputs = _case("mlp")
    monkeypatch.setenv(MEMORY_VARIABLE, "64")
    posterior = Posterior(mean=mean, var=torch.ones_like(mean))
    with pytest.raises(StageError, match=rf"linearised predictive needs about .* single row.*{MEMORY_VARIABLE}=64"):
        linearized_outputs(problem, posterior, inputs, 4, torch.Generator())


CURVATURES = ["diagonal_ggn", "dense_ggn", "diagonal_fisher", "dense_fisher"]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", CURVATURES)
def test_curvature_is_the_same_for_every_chunk_size(
    shape: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One example per chunk, a few, and all of them: the same matrix."""
    problem, params, inputs = _case(shape)
    with torch.no_grad():
        outputs = problem.forward(params, inputs)
    targets = (outputs[:, 0] > 0).double() if shape == "cnn_lstm" else (
        outputs.argmax(-1) if shape != "regression" else outputs[:, 0] + 0.1)
    function = getattr(curvature, name)
    results = []
    for size in (inputs.shape[0], 3, 1):
        monkeypatch.setattr(curvature, "chunk_size", lambda *args, size=size, **options: size)
        results.append(function(problem, params, (inputs, targets)))
    for result in results[1:]:
        torch.testing.assert_close(result, results[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_curvature_chunks_follow_the_budget(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A larger budget gives larger chunks, up to every example (or, on a CPU, the cache
    bound); the budget that fits one example gives chunks of one."""
    problem, params, inputs = _case(shape)
    monkeypatch.setitem(curvature.CACHE_ELEMENTS, "cpu", 2**40)
    sizes = []
    for limit in ("2KiB", "8KiB", "32KiB", "128KiB", "512KiB", "2MiB", UNLIMITED):
        monkeypatch.setenv(MEMORY_VARIABLE, limit)
        try:
            sizes.append(curvature.chunk_size(problem, params, inputs, 2))
        except StageError:
            assert not sizes, "a larger budget failed where a smaller one did not"
    assert sizes == sorted(sizes) and sizes[-1] == inputs.shape[0] and sizes[0] < sizes[-1], sizes
    monkeypatch.setitem(curvature.CACHE_ELEMENTS, "cpu", 2 * params.numel() * 2)
    assert curvature.chunk_size(problem, params, inputs, 2) == 2


def test_curvature_names_the_setting_when_one_example_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    problem, params, inputs = _case("mlp")
    monkeypatch.setenv(MEMORY_VARIABLE, "1KiB")
    with pytest.raises(StageError, match=rf"curvature .* single row.*{MEMORY_VARIABLE}=1KiB"):
        curvature.diagonal_ggn(problem, params, (inputs, torch.zeros(inputs.shape[0], dtype=torch.long)))


def test_an_unreadable_limit_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_VARIABLE, "lots")
    with pytest.raises(StageError, match=rf"{MEMORY_VARIABLE}: 'lots' is not a size"):
        memory_budget(torch.device("cpu"))


@pytest.mark.parametrize(
    ("text", "size"),
    [("2GiB", 2 * 2**30), ("512 MiB", 512 * 2**20), ("1.5GB", 1_500_000_000), ("64k", 64_000), ("1000", 1000)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1GiB", "0", "2 parsecs", "GiB"])
def test_not_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_budget_without_the_variable_is_a_share_of_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_VARIABLE, raising=False)
    monkeypatch.setattr("bayesflow.engines.memory.available_bytes", lambda device: 10_000)
    assert memory_budget(torch.device("cpu")) == 5_000
    monkeypatch.setenv(MEMORY_VARIABLE, "3KiB")
    assert memory_budget(torch.device("cpu")) == 3 * 1024


def test_forward_bytes_count_the_activations() -> None:
    """An MLP 5 → 16 → 8 → 3 with tanh creates 16 + 16 + 8 + 8 + 3 numbers per row."""
    model = mlp(5, 3, hidden=[16, 8], activation="tanh")
    inputs = torch.randn(10, 5)
    assert forward_bytes(model, inputs) == 10 * (16 + 16 + 8 + 8 + 3) * 4
    cost = RowCost(model, inputs)
    assert (cost.per_row, cost.fixed) == ((16 + 16 + 8 + 8 + 3) * 4, 0)


def test_rows_within() -> None:
    assert rows_within(1000, 100, 30, 1000, "x") == 30
    assert rows_within(1000, 100, 30, 7, "x") == 7
    with pytest.raises(StageError, match="x needs about 1.0 KiB"):
        rows_within(1000, 1000, 24, 7, "x")
    assert format_bytes(3 * 2**30) == "3.0 GiB"
