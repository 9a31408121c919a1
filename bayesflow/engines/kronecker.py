"""A Gaussian covariance made of Kronecker-factored blocks, in eigenbasis form.

The KFAC Laplace approximation (:mod:`bayesflow.engines.kfac`) gives every block of
parameters (a layer's weight, or its bias) the covariance

    Σ_b = (Q_G ⊗ Q_A) · diag(vec V) · (Q_G ⊗ Q_A)ᵀ

where ``Q_G`` (g × g) and ``Q_A`` (a × a) are the eigenvectors of the block's two Kronecker
factors and ``V`` (g × a) the variances along their products (``T / (γₚ αₑ + c δ)`` for a
Laplace posterior). The block's parameters are the (g, a) matrix whose rows are output
units, flattened row-major into the model's flat vector at ``index`` (g, a); row-major
flattening of ``M`` is ``vec`` in ``G ⊗ A`` order.

Everything a Gaussian posterior needs follows without forming Σ:

- a draw ``Q_G (√V ⊙ Z) Q_Aᵀ`` for standard normal Z (g, a);
- the marginal variances ``(Q_G ∘ Q_G) V (Q_A ∘ Q_A)ᵀ`` (∘: elementwise square);
- the log density, with ``Σ⁻¹ = (Q_G ⊗ Q_A) diag(1 / vec V) (Q_G ⊗ Q_A)ᵀ`` and
  ``log det Σ = Σ log V``.

:class:`~bayesflow.engines.base.Posterior` holds one as ``kronecker`` beside its ``mean``
and ``var`` (the exact marginal variances), and ``posterior.npz`` stores its arrays as
``kronecker_<block>_<field>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["ARRAY_PREFIX", "KroneckerBlock", "KroneckerCovariance"]

ARRAY_PREFIX = "kronecker_"
_FIELDS = ("index", "output_vectors", "input_vectors", "scale")


@dataclass(frozen=True)
class KroneckerBlock:
    """One block ``(Q_G ⊗ Q_A) diag(vec V) (Q_G ⊗ Q_A)ᵀ`` of a covariance.

    Attributes:
        index: (g, a) positions of the block's parameters in the flat vector.
        output_vectors: Q_G (g, g), eigenvectors of the output-side factor.
        input_vectors: Q_A (a, a), eigenvectors of the input-side factor.
        scale: √V (g, a), the standard deviations along the eigenbasis.
    """

    index: Tensor
    output_vectors: Tensor
    input_vectors: Tensor
    scale: Tensor

    def rotate(self, matrix: Tensor) -> Tensor:
        """``Q_G M Q_Aᵀ`` for matrices (..., g, a): eigenbasis to parameters."""
        output_vectors = self.output_vectors.to(matrix)
        return output_vectors @ matrix @ self.input_vectors.to(matrix).T

    def variance(self) -> Tensor:
        """The block's marginal variances (g, a)."""
        return self.output_vectors.square() @ self.scale.square() @ self.input_vectors.square().T


@dataclass(frozen=True)
class KroneckerCovariance:
    """A covariance over some entries of a flat vector, block by block (module docstring).

    Entries that no block covers have no spread here (the posterior's ``var`` says what
    they have: zero for the fixed entries of a ``parameters:`` subset).
    """

    blocks: tuple[KroneckerBlock, ...]

    def deviations(self, noise: Tensor) -> Tensor:
        """Draws minus the mean (S, d), from standard normal ``noise`` (S, d): each block's
        entries ``Q_G (√V ⊙ Z) Q_Aᵀ`` with Z its entries of the noise, zero elsewhere."""
        result = torch.zeros_like(noise)
        for block in self.blocks:
            index = block.index.to(noise.device)
            standard = noise[:, index] * block.scale.to(noise)
            result[:, index.reshape(-1)] = block.rotate(standard).flatten(1)
        return result

    def variance(self, dimension: int, like: Tensor) -> Tensor:
        """The marginal variances (d,) of every entry, zero where no block covers one."""
        result = like.new_zeros(dimension)
        for block in self.blocks:
            result[block.index.reshape(-1).to(like.device)] = block.variance().to(like).reshape(-1)
        return result

    def log_density(self, displacement: Tensor) -> Tensor:
        """``log N(μ + x; μ, Σ)`` over the covered entries, for ``x`` (..., d)."""
        total = displacement.new_zeros(displacement.shape[:-1])
        for block in self.blocks:
            piece = displacement[..., block.index.to(displacement.device)]
            # Σ⁻¹ in the eigenbasis: Q_Gᵀ X Q_A is the displacement there.
            rotated = block.output_vectors.to(piece).T @ piece @ block.input_vectors.to(piece)
            scale = block.scale.to(piece)
            quadratic = (rotated / scale).square().flatten(-2).sum(-1)
            total = total - 0.5 * (
                quadratic + 2 * scale.log().sum() + scale.numel() * math.log(2 * math.pi)
            )
        return total

    def embed(self, index: Tensor) -> KroneckerCovariance:
        """The same covariance in a larger flat space where entry j sits at ``index[j]``."""
        return KroneckerCovariance(tuple(
            KroneckerBlock(index.to(block.index.device)[block.index], block.output_vectors,
                           block.input_vectors, block.scale)
            for block in self.blocks
        ))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays saved in ``posterior.npz`` (``kronecker_<block>_<field>``)."""
        return {
            f"{ARRAY_PREFIX}{number}_{name}": getattr(block, name).detach().cpu().numpy()
            for number, block in enumerate(self.blocks)
            for name in _FIELDS
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> KroneckerCovariance | None:
        """Inverse of :meth:`to_arrays`; None when the arrays hold no block."""
        count = sum(1 for key in arrays if key.startswith(ARRAY_PREFIX) and key.endswith("_scale"))
        if count == 0:
            return None
        return cls(tuple(
            KroneckerBlock(*(torch.as_tensor(arrays[f"{ARRAY_PREFIX}{number}_{name}"])
                             for name in _FIELDS))
            for number in range(count)
        ))
