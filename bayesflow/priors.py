"""Priors p(θ) over the flat parameter vector.

A :class:`Prior` is a rule from a model's parameter tensors (their names and shapes) to
the parameter of a factorised density on each tensor's entries: a variance for the
normal family, a scale for the Laplace family. :meth:`Prior.bind` expands the per-tensor
values into per-entry vectors once, so ``log_prob`` is one vectorised sum inside every
engine step (and batches under ``torch.func.vmap``).

The registered priors, and the diagonal precision a Laplace approximation adds to the
curvature (:attr:`BoundPrior.precision`):

- ``diag_normal``: N(0, v) with one variance v, or one per glob pattern of tensor names
  (first match wins); precision 1 / v.
- ``he_normal``: N(0, scale / fan_in) for weight tensors (He et al., 2015,
  https://arxiv.org/abs/1502.01852), N(0, bias_variance) for one-dimensional tensors;
  precision 1 / variance.
- ``laplace``: exp(−|θ| / b) / (2b) with scale b; precision 1 / (2b²) (see below).
- ``none``: flat, log p(θ) = 0 (maximum likelihood); precision 0.

The Laplace density's log is piecewise linear: it has no curvature anywhere except a
kink at 0, so "the Hessian of −log p(θ)" gives no usable precision. bayesflow uses
1 / (2b²), the precision of the normal with the Laplace prior's variance 2b² (a moment
match), so a Laplace approximation under a Laplace prior has the same prior spread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

import torch
from torch import Tensor

from bayesflow.errors import SpecError
from bayesflow.registry import Registry

__all__ = ["PRIORS", "BoundPrior", "Prior", "build_prior", "fan_in", "scaled"]

Family = Literal["normal", "laplace", "flat"]
Shape = tuple[int, ...]
# names, shapes -> one value (variance or scale) per tensor
TensorRule = Callable[[Sequence[str], Sequence[Shape]], list[float]]


@dataclass(frozen=True)
class BoundPrior:
    """A prior expanded over one model's flat parameter vector.

    Attributes:
        family: ``"normal"``, ``"laplace"`` or ``"flat"``.
        values: (d,) per-entry variance (normal) or scale b (laplace); empty when flat.
        precision: (d,) the diagonal precision a Laplace approximation adds.

    Bound with ``compact=True`` and one value for every tensor, ``values`` and
    ``precision`` are (d,) broadcast views of one number (stride 0: no d floats; read
    them, never write to them); :func:`scaled` keeps such a view one.
        constant: the log normalising constant summed over the entries.
    """

    family: Family
    values: Tensor
    precision: Tensor
    constant: float

    def log_prob(self, params: Tensor) -> Tensor:
        """log p(θ) for flat ``params`` (..., d), summed over the last axis."""
        if self.family == "flat":
            return params.new_zeros(params.shape[:-1])
        if self.family == "normal":
            return -0.5 * (params**2 * self.precision).sum(-1) + self.constant
        return -(params.abs() / self.values).sum(-1) + self.constant


@dataclass(frozen=True)
class Prior:
    """A factorised prior, defined per parameter tensor.

    Attributes:
        name: registry name.
        family: ``"normal"``, ``"laplace"`` or ``"flat"``.
        rule: ``(names, shapes) -> one variance (normal) or scale (laplace) per tensor``;
            ``None`` for the flat prior.
    """

    name: str
    family: Family
    rule: TensorRule | None = None

    def bind(
        self,
        names: Sequence[str],
        shapes: Sequence[Shape],
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        compact: bool = False,
    ) -> BoundPrior:
        """Expand the per-tensor values over the flat vector the tensors make; with
        ``compact`` and one value for all, as broadcast views of that one value (a
        language model's subset of millions of entries: see :class:`BoundPrior`)."""
        dimension = sum(math.prod(shape) for shape in shapes)
        if self.family == "flat" or self.rule is None:
            zeros = torch.zeros(dimension, dtype=dtype, device=device)
            return BoundPrior("flat", zeros[:0], zeros, 0.0)
        per_tensor = self.rule(names, shapes)
        if compact and dimension > 0 and len(set(per_tensor)) == 1:
            bound = self.bind(["one"], [(1,)], dtype, device)
            return BoundPrior(
                self.family,
                bound.values.expand(dimension),
                bound.precision.expand(dimension),
                bound.constant * dimension,
            )
        sizes = [math.prod(shape) for shape in shapes]
        values = torch.repeat_interleave(
            torch.tensor(per_tensor, dtype=torch.float64), torch.tensor(sizes, dtype=torch.long)
        )
        if self.family == "normal":
            precision = 1.0 / values
            constant = -0.5 * float(torch.log(2 * math.pi * values).sum())
        else:
            precision = 1.0 / (2.0 * values**2)  # the module docstring says why
            constant = -float(torch.log(2 * values).sum())
        return BoundPrior(
            self.family,
            values.to(dtype=dtype, device=device),
            precision.to(dtype=dtype, device=device),
            constant,
        )

    def log_prob(self, params: Tensor, names: Sequence[str], shapes: Sequence[Shape]) -> Tensor:
        """log p(θ) for a flat vector θ made of the tensors ``names`` with ``shapes``."""
        return self.bind(names, shapes, params.dtype, params.device).log_prob(params)

    def precision(
        self, names: Sequence[str], shapes: Sequence[Shape], dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The diagonal precision (d,) over the flat vector; zeros for the flat prior."""
        return self.bind(names, shapes, dtype).precision


def scaled(vector: Tensor, factor: float) -> Tensor:
    """``factor · vector``; a broadcast view of one number (a compact
    :class:`BoundPrior`'s) stays one, with the same value in every entry."""
    if vector.dim() == 1 and vector.numel() > 1 and vector.stride(0) == 0:
        return (vector[:1] * factor).expand(vector.shape)
    return vector * factor


def fan_in(shape: Shape) -> int:
    """Inputs feeding one output unit: the product of all but the first dimension.

    This is torch's convention for ``Linear`` (out, in), ``Conv`` (out, in, *kernel) and
    recurrent weights (gates · hidden, in).
    """
    return math.prod(shape[1:])


def _by_pattern(variances: Mapping[str, float]) -> TensorRule:
    """Variance of each tensor: the value of the first pattern its name matches."""

    def rule(names: Sequence[str], shapes: Sequence[Shape]) -> list[float]:
        listed = ", ".join(names)
        unused = [p for p in variances if not any(fnmatchcase(name, p) for name in names)]
        if unused:
            raise SpecError(
                f"prior.variance: pattern(s) {unused} match no parameter tensor of the model; "
                f"its tensors are: {listed}"
            )
        values = []
        for name in names:
            match = next((p for p in variances if fnmatchcase(name, p)), None)
            if match is None:
                raise SpecError(
                    f"prior.variance: parameter tensor {name!r} matches none of the patterns "
                    f"{list(variances)}; add a catch-all last, e.g. '*': 1.0 "
                    f"(the model's tensors: {listed})"
                )
            values.append(float(variances[match]))
        return values

    return rule


PRIORS: Registry[Any] = Registry("prior")


@PRIORS.register("diag_normal")
def diag_normal(variance: float | Mapping[str, float] = 1.0) -> Prior:
    """Normal N(0, v): one variance, or one per glob pattern of tensor names.

    Args:
        variance: one variance for every parameter, or a mapping from glob patterns of
            tensor names to variances (``{"*.bias": 1.0, "*": 0.1}``); the first pattern
            a name matches gives its variance.
    """
    if isinstance(variance, Mapping):
        return Prior("diag_normal", "normal", _by_pattern(dict(variance)))
    value = float(variance)
    return Prior("diag_normal", "normal", lambda names, shapes: [value] * len(names))


@PRIORS.register("he_normal")
def he_normal(scale: float = 2.0, bias_variance: float = 1.0) -> Prior:
    """Normal with variance scale / fan_in per weight tensor; 1-D tensors get bias_variance.

    Args:
        scale: numerator of the variance; 2 is He et al. (2015) for ReLU networks, 1 is
            LeCun's.
        bias_variance: variance of one-dimensional tensors (biases, normalisation scales),
            which have no fan-in.
    """

    def rule(names: Sequence[str], shapes: Sequence[Shape]) -> list[float]:
        return [scale / fan_in(shape) if len(shape) >= 2 else bias_variance for shape in shapes]

    return Prior("he_normal", "normal", rule)


@PRIORS.register("laplace")
def laplace(scale: float = 1.0) -> Prior:
    """I.i.d. Laplace exp(−|θ|/b)/(2b); Laplace approximations use precision 1/(2b²).

    Args:
        scale: the scale b (the variance is 2b²).
    """
    value = float(scale)
    return Prior("laplace", "laplace", lambda names, shapes: [value] * len(names))


@PRIORS.register("none")
def none() -> Prior:
    """A flat prior: log p(θ) = 0 (maximum likelihood)."""
    return Prior("none", "flat")


def build_prior(config: dict[str, Any]) -> Prior:
    """Build the prior a spec's ``prior`` section describes."""
    options = dict(config)
    return PRIORS.get(options.pop("name"))(**options)
