"""The CNN-LSTM text classifier of the cold-posterior IMDB experiments.

Embedding, 1-D convolution, ReLU, max-pool, LSTM, linear: the model of Wenzel et al.
(2020, https://arxiv.org/abs/2002.02405), as re-implemented by Izmailov et al. (2021,
google-research/bnn_hmc ``make_cnn_lstm``) and by the posteriors IMDB example, whose
sizes are the defaults here (vocabulary 20,000, embedding 128, 64 filters of width 5,
pool 4, LSTM 128).

The LSTM is :class:`LSTM`, written from matrix products: ``torch.func.vmap`` over
``nn.LSTM`` has no batching rule for ``aten::mkldnn_rnn_layer`` and falls back, with a
warning, to a loop over the batched parameters (measured on torch 2.13), while
matrix products vectorise over parameter samples and chains. Outside ``vmap`` (one chain,
MAP, VI, Laplace, evaluation of one sample at a time) it runs torch's fused kernel instead,
with the same parameters and the same numbers (tests/models/test_lstm_fused.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional

from bayesflow.errors import SpecError
from bayesflow.models.registry import MODELS

__all__ = ["CNNLSTM", "LSTM", "cnn_lstm"]


class LSTM(nn.Module):
    """One LSTM layer over a batch-first sequence, returning the last hidden state.

    The gates are torch's (input, forget, cell, output, in that order), with one bias
    where ``nn.LSTM`` has two that only enter as their sum. Parameters: ``weight_ih``
    (4H, input), ``weight_hh`` (4H, H), ``bias`` (4H).

    Args:
        input_size: features per step.
        hidden_size: H.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.LSTM``'s initialisation: every entry uniform on ±1/√H."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)

    def forward(self, inputs: Tensor) -> Tensor:
        """Inputs (n, L, input) to the hidden state after the last step (n, H): torch's fused
        LSTM kernel (oneDNN on a CPU, cuDNN on a GPU) when no ``vmap`` is running, else the
        step-by-step form that vectorises over chains and parameter samples."""
        if not _under_vmap():
            return self._fused(inputs)
        count, length, _ = inputs.shape
        # The input half of every step's gates at once: one large product, not L small ones.
        projected = inputs @ self.weight_ih.T + self.bias
        hidden = torch.zeros(count, self.hidden_size, dtype=inputs.dtype, device=inputs.device)
        cell = torch.zeros_like(hidden)
        for step in range(length):
            gates = projected[:, step] + hidden @ self.weight_hh.T
            input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
            cell = forget_gate.sigmoid() * cell + input_gate.sigmoid() * candidate.tanh()
            hidden = output_gate.sigmoid() * cell.tanh()
        return hidden

    def _fused(self, inputs: Tensor) -> Tensor:
        """The same layer through ``torch.lstm`` (its second bias held at zero)."""
        start = inputs.new_zeros(1, inputs.shape[0], self.hidden_size)
        weights = [self.weight_ih, self.weight_hh, self.bias, torch.zeros_like(self.bias)]
        _, hidden, _ = torch.lstm(inputs, (start, start), weights, True, 1, 0.0, self.training, False, True)
        return hidden[0]


def _under_vmap() -> bool:
    """Whether a ``torch.func.vmap`` is running (at any depth of the functorch transforms):
    ``torch.lstm`` has no batching rule, so the step-by-step form is used there."""
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    return any(level.key() == TransformType.Vmap for level in retrieve_all_functorch_interpreters())


class CNNLSTM(nn.Module):
    """Token ids (n, L) to outputs (n, k): embedding, conv, ReLU, max-pool, LSTM, linear.

    Parameter tensors: ``embedding.weight``, ``conv.weight``, ``conv.bias``,
    ``lstm.weight_ih``, ``lstm.weight_hh``, ``lstm.bias``, ``fc.weight``, ``fc.bias``.
    """

    def __init__(
        self,
        num_outputs: int,
        vocabulary_size: int,
        embedding_size: int,
        filters: int,
        kernel_size: int,
        pool_size: int,
        hidden_size: int,
    ) -> None:
        super().__init__()
        self.pool_size = pool_size
        self.embedding = nn.Embedding(vocabulary_size, embedding_size)
        self.conv = nn.Conv1d(embedding_size, filters, kernel_size)  # "valid" padding
        self.lstm = LSTM(filters, hidden_size)
        self.fc = nn.Linear(hidden_size, num_outputs)

    def forward(self, tokens: Tensor) -> Tensor:
        # Token ids may arrive as floats from a numeric array; embedding needs integers.
        embedded = self.embedding(tokens.long())  # (n, L, E)
        features = functional.relu(self.conv(embedded.transpose(1, 2)))  # (n, F, L - k + 1)
        pooled = functional.max_pool1d(features, self.pool_size)  # (n, F, L')
        return self.fc(self.lstm(pooled.transpose(1, 2)))


@MODELS.register("cnn_lstm")
def cnn_lstm(
    num_features: int,
    num_outputs: int,
    vocabulary_size: int = 20_000,
    embedding_size: int = 128,
    filters: int = 64,
    kernel_size: int = 5,
    pool_size: int = 4,
    hidden_size: int = 128,
) -> nn.Module:
    """CNN-LSTM text classifier over token ids (the cold-posterior IMDB model).

    Args:
        num_features: the sequence length L (tokens per example, padded).
        num_outputs: outputs of the linear head.
        vocabulary_size: number of token ids; inputs must lie in [0, vocabulary_size).
        embedding_size: width of the token embedding.
        filters: channels of the 1-D convolution.
        kernel_size: width of the convolution ("valid" padding).
        pool_size: width and stride of the max-pool.
        hidden_size: LSTM hidden state size.
    """
    steps = (num_features - kernel_size + 1) // pool_size
    if steps < 1:
        raise SpecError(
            f"model: sequences of {num_features} tokens leave no LSTM steps after a "
            f"convolution of width {kernel_size} and a pool of {pool_size}; "
            "use a smaller kernel_size or pool_size, or longer sequences"
        )
    return CNNLSTM(
        num_outputs, vocabulary_size, embedding_size, filters, kernel_size, pool_size, hidden_size
    )
