"""Kronecker-factored curvature (KFAC) of ``nn.Linear`` and ``nn.Conv2d`` layers.

For a layer with inputs aᵢ (a row per example, or per position of a shared weight) and
outputs sᵢ, the curvature of the negative log likelihood in its weight W (out × in,
flattened row-major) is approximated by one Kronecker product (Martens & Grosse, 2015,
https://arxiv.org/abs/1503.05671; convolutions as KFC, Grosse & Martens, 2016,
https://arxiv.org/abs/1602.01407, in its "expand" form, Eschenhagen et al., 2023,
https://arxiv.org/abs/2311.00636)::

    C_W ≈ G ⊗ A,   A = Σᵢ aᵢ aᵢᵀ / R,   G = Σᵢ Σₖ gᵢₖ gᵢₖᵀ

with R the number of input rows (N examples times the positions sharing the weight: the
output pixels of a convolution), and

- GGN (``kind="ggn"``): ``gᵢₖ = ∂oᵢ/∂sᵢᵀ · Lᵢ[:, k]``, the output Hessian's square root
  ``Hᵢ = Lᵢ Lᵢᵀ`` pulled back to the layer's outputs, one backward pass per output k: the
  exact (not Monte Carlo sampled) KFAC of the generalised Gauss-Newton matrix;
- empirical Fisher (``kind="fisher"``): ``gᵢ = ∂ log p(yᵢ|xᵢ,θ)/∂sᵢ``, one backward pass.

A bias is its own block, with the layer's G as its curvature (exact: its input is 1), as
laplace-torch does (``separate_weight_and_bias``). Sums run over every batch of the pass
before the product is formed, so the result does not depend on the batch size; with one
full batch it equals laplace-torch's ``hessian_structure="kron"`` (curvlinops backend),
whose input factor is the mean over rows and gradient factor the sum.

The curvature pass keeps ``Σ aaᵀ``, ``G`` and R of every layer packed in one flat tensor
(:func:`factor_size`), the ``curvature`` of a :class:`~bayesflow.methods.laplace_kfac.KfacState`
that the curvature stage saves and shares between temperatures; the evidence reads it by
:func:`kronecker_log_det`. :func:`kronecker_posterior`
turns it into the posterior ``N(θ*, T · (C + c·δ)⁻¹)`` by the eigendecompositions
``A = Q_A diag(α) Q_Aᵀ`` and ``G = Q_G diag(γ) Q_Gᵀ``: the precision's eigenvalues are
``γₚ αₑ + c δ`` for a weight and ``γₚ + c δ`` for a bias, with δ the block's prior
precision (one value per tensor, as laplace-torch's per-layer prior precision).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn import functional

from bayesflow.engines.base import Batch, Problem
from bayesflow.engines.curvature import hessian_roots
from bayesflow.engines.kronecker import KroneckerBlock, KroneckerCovariance
from bayesflow.errors import StageError

__all__ = [
    "FactorKind",
    "KfacLayer",
    "accumulate_factors",
    "check_prior",
    "curvature_eigenbases",
    "factor_size",
    "kfac_layers",
    "kronecker_log_det",
    "kronecker_posterior",
    "log_det_precision",
    "precision_eigenvalues",
    "sequence_rows",
    "unpack",
]

FactorKind = Literal["ggn", "fisher"]


@dataclass(frozen=True)
class KfacLayer:
    """A Linear or Conv2d layer whose weight or bias is inferred.

    Attributes:
        name: the module's name in the model (``"fc"``, ``"2"``).
        module: the module, whose forward hook records its inputs and outputs.
        weight: (out, in) positions of the weight in the problem's flat vector (a
            convolution's in is channels × kernel height × kernel width), or None when it
            is held fixed.
        bias: (out, 1) positions of the bias, or None when absent or fixed.
        shape: (out, in) of the weight matrix.
    """

    name: str
    module: nn.Linear | nn.Conv2d
    weight: Tensor | None
    bias: Tensor | None
    shape: tuple[int, int]


@dataclass(frozen=True)
class Layers:
    """A problem's model seen layer by layer: ``forward(θ, inputs)`` over its own flat
    vector with the layers' hooks firing, and the layers.

    ``positions``, when given, maps a batch's inputs to the (sequences, L) mask of its real
    positions (False at padding): then padded rows enter neither factor, and each sequence's
    real rows count as one row of weight 1 in ``Σ aaᵀ`` (``a aᵀ`` averaged over its real
    positions) and R counts sequences (:func:`sequence_rows`).
    """

    forward: Callable[[Tensor, Tensor], Tensor]
    layers: tuple[KfacLayer, ...]
    positions: Callable[[Tensor], Tensor] | None = None


def kfac_layers(problem: Problem, engine: str) -> Layers:
    """The Linear and Conv2d layers of ``problem``'s model that hold its parameters.

    A problem restricted to a subset (``parameters:``, :mod:`bayesflow.subset`) keeps its
    model; the layers then cover the selected tensors only (a last-layer Laplace).

    Raises:
        StageError: the model is not a module bayesflow built, or a parameter tensor
            is not the weight or bias of an ``nn.Linear`` or ``nn.Conv2d`` (KFAC does not
            fall back to a diagonal: the message says to select the layers it covers with
            ``parameters:`` or to use a diagonal Laplace).
    """
    full, embedding = problem.parent or (problem, None)
    module = full.module
    if not isinstance(module, nn.Module):
        raise StageError(
            f"{engine}: needs the model's layers, but this model's forward pass is a plain "
            "function; use a registered or `python:` model, or a diagonal Laplace"
        )
    fill = (lambda params: params) if embedding is None else embedding.fill
    own = torch.arange(full.dimension)
    if embedding is not None:  # full position -> position in the subset vector, or -1
        own = torch.full((full.dimension,), -1, dtype=torch.long)
        own[embedding.index.cpu()] = torch.arange(problem.dimension)
    named = list(module.named_parameters())
    if tuple(name for name, _ in named) != full.param_names:
        raise StageError(
            f"{engine}: the model's parameter tensors are not the problem's flat vector, in "
            "order (frozen or extra tensors), so its layers cannot be located; use a "
            "diagonal Laplace"
        )
    offsets, position = {}, 0
    for name, value in named:
        offsets[id(value)] = (name, position)
        position += value.numel()

    def positions(value: Tensor | None, rows: int) -> tuple[str | None, Tensor | None]:
        if value is None:
            return None, None
        name, start = offsets[id(value)]
        index = own[start : start + value.numel()].reshape(rows, -1)
        return (name, index) if bool((index >= 0).all()) else (None, None)

    layers, covered = [], set()
    for layer_name, child in module.named_modules():
        if not isinstance(child, (nn.Linear, nn.Conv2d)):
            continue
        out = child.weight.shape[0]
        weight_name, weight = positions(child.weight, out)
        bias_name, bias = positions(child.bias, out)
        if weight is None and bias is None:
            continue
        check_layer(engine, layer_name, child)
        covered |= {weight_name, bias_name}
        layers.append(KfacLayer(layer_name, child, weight, bias, (out, child.weight[0].numel())))
    missing = [name for name in problem.param_names if name not in covered]
    if missing:
        raise StageError(
            f"{engine}: KFAC covers the weights and biases of nn.Linear and nn.Conv2d layers, "
            f"but {missing} are not; infer only those layers with `parameters: [...]` (for "
            "example the last layer), or use `laplace_diag_ggn`"
        )

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        return full.forward(fill(params), inputs)

    return Layers(forward, tuple(layers))


def check_layer(engine: str, name: str, module: nn.Module) -> None:
    """Refuse the convolutions the unfolded (KFC) form does not cover."""
    if isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"):
        raise StageError(
            f"{engine}: layer {name!r} is a grouped or non-zero-padded convolution, which "
            "KFAC does not cover here; leave it out with `parameters: [...]`"
        )


def factor_size(layers: Layers) -> int:
    """Length of the packed curvature: per layer Σ aaᵀ (in²), G (out²) and R (1)."""
    return sum(layer.shape[1] ** 2 + layer.shape[0] ** 2 + 1 for layer in layers.layers)


def unpack(layers: Layers, packed: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The (Σ aaᵀ, G, R) of every layer from the packed curvature."""
    result, start = [], 0
    for layer in layers.layers:
        out, width = layer.shape
        inputs = packed[start : start + width * width].view(width, width)
        start += width * width
        outputs = packed[start : start + out * out].view(out, out)
        start += out * out
        result.append((inputs, outputs, packed[start]))
        start += 1
    return result


def layer_rows(module: nn.Module, inputs: Tensor) -> Tensor:
    """A layer's input rows (R, in): positions sharing the weight become rows; a
    convolution's inputs are unfolded into patches (its "expand" form)."""
    if isinstance(module, nn.Linear):
        return inputs.reshape(-1, inputs.shape[-1])
    assert isinstance(module, nn.Conv2d)
    padding: Any = module.padding
    if isinstance(padding, str):  # "same" may pad one more on the right than the left
        if padding == "valid":
            padding = (0, 0)
        else:
            totals = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size)]
            pads = [(total // 2, total - total // 2) for total in totals]
            inputs = functional.pad(inputs, (*pads[1], *pads[0]))
            padding = (0, 0)
    patches = functional.unfold(inputs, module.kernel_size, module.dilation, padding, module.stride)
    return patches.transpose(1, 2).reshape(-1, patches.shape[1])


def output_rows(module: nn.Module, gradients: Tensor) -> Tensor:
    """Gradients at a layer's outputs as rows (R, out), matching :func:`layer_rows`."""
    if isinstance(module, nn.Conv2d):
        gradients = gradients.movedim(1, -1)
    return gradients.reshape(-1, gradients.shape[-1])


def accumulate_factors(
    problem: Problem, layers: Layers, params: Tensor, batch: Batch, kind: FactorKind
) -> Tensor:
    """The batch's packed Σ aaᵀ, G and R of every layer (module docstring), at ``params``.

    Raises:
        StageError: a layer runs more than once in a forward pass (shared weights).
    """
    inputs, targets = batch
    records: dict[str, list[tuple[Tensor, Tensor]]] = {layer.name: [] for layer in layers.layers}

    def recorder(name: str) -> Callable[..., None]:
        def record(module: nn.Module, arguments: tuple[Tensor, ...], output: Tensor) -> None:
            records[name].append((arguments[0].detach(), output))

        return record

    handles = [layer.module.register_forward_hook(recorder(layer.name)) for layer in layers.layers]
    try:
        with torch.enable_grad():
            outputs = layers.forward(params.detach().requires_grad_(True), inputs)
    finally:
        for handle in handles:
            handle.remove()
    for name, calls in records.items():
        if len(calls) != 1:
            raise StageError(f"KFAC: layer {name!r} ran {len(calls)} times in one forward pass; "
                             "KFAC needs each layer applied once (no shared weights)")
    layer_outputs = [records[layer.name][0][1] for layer in layers.layers]
    mask = None if layers.positions is None else layers.positions(inputs)
    gradient_factors = [outputs.new_zeros(layer.shape[0], layer.shape[0]) for layer in layers.layers]
    for grads in _output_gradients(problem, outputs, targets, layer_outputs, kind):
        for layer, total, gradient in zip(layers.layers, gradient_factors, grads):
            if mask is None:
                rows = output_rows(layer.module, gradient).to(total.dtype)  # bf16 layers: sum in fp32
            else:  # a padded row's gradient is zero already (nothing reads it); the mask says so
                rows, kept, _ = sequence_rows(layer.name, gradient.to(total.dtype), mask)
                rows = rows * kept.unsqueeze(-1)
            total += rows.T @ rows
    pieces = []
    for layer, gradient_factor in zip(layers.layers, gradient_factors):
        recorded = records[layer.name][0][0].to(gradient_factor.dtype)
        if mask is None:
            rows = layer_rows(layer.module, recorded)
            input_sum, count = rows.T @ rows, rows.new_full((1,), rows.shape[0])
        else:
            rows, _, weights = sequence_rows(layer.name, recorded, mask)
            input_sum, count = (rows * weights.unsqueeze(-1)).T @ rows, rows.new_full((1,), mask.shape[0])
        pieces += [input_sum.reshape(-1), gradient_factor.reshape(-1), count]
    return torch.cat(pieces).detach()


def sequence_rows(name: str, values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """A Linear layer's inputs or output gradients (sequences, P, width) of padded
    sequences as rows (sequences × P, width), each row's 0/1 real mask, and its weight in
    the input factor: ``1 / (the sequence's real positions among the P)``, so a sequence's
    ``Σ aaᵀ`` term is the mean over its real positions, and a padded sequence's term equals
    the same sequence's unpadded (laplace-torch's per-batch input factor, a mean over
    positions, rescaled by batch / N, gives the same sum for any grouping of equal-length
    prompts into batches).

    ``mask`` (sequences, L) is the batch's real positions (:class:`Layers`); a layer that
    runs at the last P ≤ L positions only (an output layer under ``logits_to_keep``) reads
    the mask's last P columns.

    Raises:
        StageError: the layer's rows do not split into the mask's sequences.
    """
    mask = mask.reshape(-1, mask.shape[-1]).to(values.dtype)
    sequences, length = mask.shape
    rows = values.shape[:-1].numel()
    positions = rows // max(sequences, 1)
    if positions * sequences != rows or not 1 <= positions <= length:
        raise StageError(
            f"KFAC: layer {name!r} saw {rows} rows, which do not split into the batch's "
            f"{sequences} sequences of at most {length} positions; KFAC over padded "
            "sequences needs every layer to run at each sequence's positions"
        )
    kept = mask[:, length - positions :]
    weights = kept / kept.sum(-1, keepdim=True).clamp(min=1)
    return values.reshape(rows, -1), kept.reshape(-1), weights.reshape(-1)


def _output_gradients(
    problem: Problem, outputs: Tensor, targets: Tensor, layer_outputs: list[Tensor],
    kind: FactorKind,
) -> list[tuple[Tensor, ...]]:
    """The gradients at the layers' outputs that G sums: one set per output k (GGN), or
    the log likelihood's per-example gradients (empirical Fisher)."""
    if kind == "fisher":
        log_likelihood = problem.log_likelihood(outputs, targets).sum()
        return [torch.autograd.grad(log_likelihood, layer_outputs)]
    roots = hessian_roots(problem.output_hessian(outputs.detach()))
    count = roots.shape[-1]
    return [
        torch.autograd.grad(outputs, layer_outputs, roots[..., k], retain_graph=k + 1 < count)
        for k in range(count)
    ]


Eigenbasis = tuple[str, Tensor, Tensor, Tensor, Tensor]


def curvature_eigenbases(layers: Layers, packed: Tensor) -> list[Eigenbasis]:
    """Every block's layer name, index (g, a), eigenvectors Q_G and Q_A, and the
    eigenvalues (g, a) of its curvature: ``γₚ αₑ`` for a weight, ``γₚ`` for a bias."""
    result = []
    for layer, (inputs, outputs, rows) in zip(layers.layers, unpack(layers, packed)):
        alpha, input_vectors = torch.linalg.eigh(inputs / rows.clamp(min=1))
        gamma, output_vectors = torch.linalg.eigh(outputs)
        alpha, gamma = alpha.clamp(min=0), gamma.clamp(min=0)
        if layer.weight is not None:
            result.append((layer.name, layer.weight, output_vectors, input_vectors,
                           torch.outer(gamma, alpha)))
        if layer.bias is not None:
            result.append((layer.name, layer.bias, output_vectors, gamma.new_ones(1, 1),
                           gamma.unsqueeze(1)))
    return result


def precision_eigenvalues(
    problem: Problem, layers: Layers, packed: Tensor, prior_weight: float
) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Every block's index (g, a), eigenvectors Q_G and Q_A, and the eigenvalues (g, a) of
    its full-data precision ``C + c·δ`` (module docstring), δ read from
    ``problem.prior_precision`` (so a problem with an evidence-chosen prior moves them)."""
    return [
        (index, output_vectors, input_vectors,
         values + prior_weight * block_prior(problem.prior_precision, name, index))
        for name, index, output_vectors, input_vectors, values in curvature_eigenbases(layers, packed)
    ]


def check_prior(problem: Problem, layers: Layers) -> None:
    """Refuse a prior whose precision varies within a block (:func:`block_prior`)."""
    for name, index in ((layer.name, index) for layer in layers.layers
                        for index in (layer.weight, layer.bias) if index is not None):
        block_prior(problem.prior_precision, name, index)


def block_prior(precision: Tensor, name: str, index: Tensor) -> Tensor:
    """The one prior precision δ (0-d) of the block at ``index`` of layer ``name``, from a
    (d,) precision (differentiable in it), or a 0-d one as it is.

    Raises:
        StageError: the precision varies within the block.
    """
    if precision.ndim == 0:
        return precision
    values = precision[index.to(precision.device).reshape(-1)]
    spread = (values.max() - values.min()).abs().detach()
    if bool(spread > 1e-6 * values.max().abs().detach()):
        raise StageError(
            f"KFAC: the prior precision varies within a tensor of layer {name!r} "
            f"({float(values.min()):g} to {float(values.max()):g}); KFAC needs one prior "
            "precision per tensor (a `diag_normal` prior)"
        )
    return values[0]


def kronecker_posterior(
    engine: str, problem: Problem, layers: Layers, packed: Tensor, temperature: float,
    prior_weight: float,
) -> KroneckerCovariance:
    """The covariance ``T · (C + c·δ)⁻¹``, block by block, of a KFAC curvature.

    Raises:
        StageError: a direction has no curvature and no prior (an infinite variance).
    """
    blocks = []
    for index, output_vectors, input_vectors, eigenvalues in precision_eigenvalues(
        problem, layers, packed, prior_weight
    ):
        if bool((eigenvalues <= 0).any()):
            raise StageError(
                f"{engine}: {int((eigenvalues <= 0).sum())} directions of the parameters at "
                f"flat index {int(index.reshape(-1)[0])} on have no curvature and no prior, so "
                "an infinite variance; use a proper prior, for example "
                "`prior: {name: diag_normal}`"
            )
        scale = (temperature / eigenvalues).sqrt()
        blocks.append(KroneckerBlock(index, output_vectors, input_vectors, scale))
    return KroneckerCovariance(tuple(blocks))


def kronecker_log_det(layers: Layers, packed: Tensor) -> Callable[[Tensor], Tensor]:
    """``p -> log det(C + diag p)`` of a KFAC curvature, ``Σ log(γₚ αₑ + δ)`` over every
    block's eigenvalues (the factors are decomposed once, here, in float64).

    ``p`` is one precision for every parameter (0-d) or a (d,) one that is constant within
    each block (one per tensor); the result is differentiable in it (the evidence's
    :data:`~bayesflow.engines.evidence.LogDet`). A precision varying within a block raises
    :class:`~bayesflow.errors.StageError`.
    """
    blocks = [(name, index, values)
              for name, index, _, _, values in curvature_eigenbases(layers, packed.detach().double())]

    def log_det(prior_precision: Tensor) -> Tensor:
        precision = prior_precision.to(torch.float64)
        total = precision.new_zeros(())
        for name, index, values in blocks:
            total = total + torch.log(values + block_prior(precision, name, index)).sum()
        return total

    return log_det


def log_det_precision(problem: Problem, packed: Tensor, prior_weight: float = 1.0) -> Tensor:
    """``log det (C + c·δ)`` of a KFAC Laplace's full-data precision (a scalar, float64).

    The tempered posterior's precision is this matrix over T, so its log determinant is
    this minus ``d · log T``. ``packed`` is the curvature of a KFAC Laplace state (a
    ``curvature.npz``'s ``curvature``) on ``problem``.
    """
    layers = kfac_layers(problem, "laplace_kfac")
    return kronecker_log_det(layers, packed)(prior_weight * problem.prior_precision)
