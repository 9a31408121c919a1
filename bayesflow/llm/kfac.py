"""KFAC (Kronecker-factored empirical Fisher) over the linear layers a language model
infers: LoRA adapters (peft's ``lora_A`` / ``lora_B`` are ``nn.Linear``) or the
``nn.Linear`` layers a parameter glob selects (a last decoder layer's projections).

A transformer's linear layer is applied at every position of a window, so its weight is
shared across positions; KFAC takes the "expand" form (Eschenhagen et al., 2023,
https://arxiv.org/abs/2311.00636), every position a row, exactly as
:func:`bayesflow.engines.kfac.accumulate_factors` treats a Linear on sequence inputs::

    EF_W ≈ G ⊗ A,   A = Σ_rows a aᵀ / R,   G = Σ_rows g gᵀ

- rows: the positions 0 … L − 2 of every window, the positions whose outputs can reach a
  scored token (causal attention: position p reads positions ≤ p); the window's last
  position predicts nothing and is never run (``Problem.without_last`` of
  :func:`~bayesflow.llm.problem.build_lm_problem`), so R = windows × (L − 1);
- a: the layer's input at the row; g: the gradient, at the layer's output at that row, of
  the window's summed scored-token log likelihood (one backward pass per batch).

With one scored token in a window of two tokens there is one row and G ⊗ A is that
token's exact empirical Fisher over the layer's weight; otherwise it is the Kronecker
approximation. The factors are packed as :mod:`bayesflow.engines.kfac` packs them, so
:func:`~bayesflow.engines.kfac.kronecker_posterior` turns them into the covariance
``T · (G ⊗ A + c·δ)⁻¹`` (a :class:`~bayesflow.engines.kronecker.KroneckerCovariance`).
Only the trainable tensors enter: the frozen weights stay in the model, never flattened.

The KFAC Laplace of the empirical Fisher takes these layers on a ``next_token`` problem
(:meth:`bayesflow.llm.likelihood.NextToken.kfac_layers`; docs/llm.md).

On multiple-choice questions (:func:`choice_kfac_layers`) a question is one datum: its
outputs are the C choice logits at the prompt's last position, so G takes the GGN exactly
(C backward passes per batch, the softmax's output Hessian) or the empirical Fisher (one),
the rows are every real position of every prompt (the expand form, as laplace-torch's
curvlinops backends take it), and the left padding enters neither factor.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from bayesflow.engines.base import Problem
from bayesflow.engines.kfac import KfacLayer, Layers, accumulate_factors, kronecker_posterior
from bayesflow.engines.kronecker import KroneckerCovariance
from bayesflow.errors import StageError
from bayesflow.temperature import Tempering

__all__ = ["choice_kfac_layers", "linear_layers", "lm_kfac_factors", "lm_kfac_layers", "lm_kfac_posterior",
           "real_positions"]

ENGINE = "lm_kfac"


def lm_kfac_layers(problem: Problem) -> Layers:
    """The ``nn.Linear`` layers of a language-model problem whose weight (or bias) is a
    trainable tensor, with their positions in the problem's flat vector.

    Raises:
        StageError: ``problem`` is not a :func:`~bayesflow.llm.problem.build_lm_problem`
            problem, or a trainable tensor is not the weight or bias of an ``nn.Linear``
            (an embedding, a norm's scale).
    """
    if problem.without_last is None:
        raise StageError(f"{ENGINE}: needs a language-model problem (build_lm_problem)")
    return Layers(problem.without_last, linear_layers(problem))


def choice_kfac_layers(problem: Problem, length_columns: int = 0) -> Layers:
    """The trainable ``nn.Linear`` layers of a multiple-choice problem
    (:func:`~bayesflow.llm.choices.build_choice_problem`), run by the problem's own forward
    (its (n, C) outputs, whatever makes them), with every real position of a prompt a row
    and the padding (``-1``) none: each question's ``Σ aaᵀ`` term is ``a aᵀ`` averaged
    over its prompt's positions and R counts questions
    (:func:`bayesflow.engines.kfac.sequence_rows`), so a padded prompt's factors are the
    same prompt's unpadded, and a batch's are laplace-torch's over same-length batches.
    A question scored by its continuations (``length_columns`` = C lengths end each row) is
    one packed sequence: its prompt's and continuations' positions are its rows.

    Raises:
        StageError: a trainable tensor is not the weight or bias of an ``nn.Linear``.
    """
    positions = real_positions if not length_columns else partial(real_positions, length_columns=length_columns)
    return Layers(problem.forward, linear_layers(problem), positions=positions)


def real_positions(inputs: Tensor, length_columns: int = 0) -> Tensor:
    """The (n, L) mask of the real tokens of left-padded prompts (padding ``-1``,
    :data:`bayesflow.data.multiple_choice.PADDING`), the last ``length_columns`` of each
    row (continuation lengths, not tokens) left out."""
    return (inputs[..., : inputs.shape[-1] - length_columns] if length_columns else inputs) >= 0


def linear_layers(problem: Problem) -> tuple[KfacLayer, ...]:
    """The ``nn.Linear`` layers of a language-model problem's module whose weight or bias
    is one of its trainable tensors, with their positions in its flat vector."""
    model = problem.module
    if not isinstance(model, nn.Module):
        raise StageError(f"{ENGINE}: needs a language-model problem (build_lm_problem)")
    starts, position = {}, 0
    for name, shape in zip(problem.param_names, problem.param_shapes):
        size = int(torch.Size(shape).numel())
        starts[name] = torch.arange(position, position + size)
        position += size
    layers, covered = [], set()
    for module_name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        weight_name, bias_name = f"{module_name}.weight", f"{module_name}.bias"
        out = module.weight.shape[0]
        weight = starts[weight_name].reshape(out, -1) if weight_name in starts else None
        bias = starts[bias_name].reshape(out, 1) if bias_name in starts else None
        if weight is None and bias is None:
            continue
        covered |= {weight_name, bias_name}
        layers.append(KfacLayer(module_name, module, weight, bias, (out, module.weight.shape[1])))
    if missing := sorted(set(problem.param_names) - covered):
        raise StageError(f"{ENGINE}: KFAC covers the weights and biases of nn.Linear layers "
                         f"(LoRA adapters, attention and MLP projections), but {missing} are "
                         "not; select only linear layers, or use the diagonal token Fisher "
                         "(bayesflow.llm.curvature)")
    return tuple(layers)


def lm_kfac_factors(
    problem: Problem, layers: Layers, params: Tensor, inputs: Tensor, targets: Tensor,
    batch_size: int | None = None,
) -> Tensor:
    """The packed (Σ aaᵀ, G, R) of every layer (module docstring) over all windows, summed
    batch by batch (the sums do not depend on ``batch_size``)."""
    step = batch_size or inputs.shape[0]
    total: Tensor | None = None
    for start in range(0, inputs.shape[0], step):
        batch = (inputs[start : start + step], targets[start : start + step])
        packed = accumulate_factors(problem, layers, params, batch, "fisher")
        total = packed if total is None else total + packed
    assert total is not None, "no windows"
    return total


def lm_kfac_posterior(
    problem: Problem, layers: Layers, packed: Tensor, tempering: Tempering
) -> KroneckerCovariance:
    """The covariance ``T · (G ⊗ A + c·δ)⁻¹`` of every layer's blocks, with T and the prior
    weight c from ``tempering`` (the same convention as every other method).

    Raises:
        StageError: a direction with no curvature and no prior.
    """
    return kronecker_posterior(
        ENGINE, problem, layers, packed, tempering.temperature, tempering.prior_weight
    )
