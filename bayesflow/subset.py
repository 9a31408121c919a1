"""Inference over a subset of the parameters, the rest held fixed.

A method with ``parameters: ["fc.*"]`` (last-layer Laplace, say) infers only the tensors
whose names match the glob patterns and keeps every other entry at the values of the
method it starts ``from``. :func:`restrict_problem` turns the full :class:`Problem` into
one over the selected entries only, so every engine runs unchanged on it, and returns the
:class:`Embedding` that maps the subset posterior back to the full flat space (so
``posterior.npz`` always has the full model's ``param_names``).

The restricted problem is the conditional p(θ_S | θ_R fixed, D): its forward pass fills
the fixed entries θ_R in, and its log prior is the full log prior at the filled vector,
which for any prior is log p(θ_S | θ_R) up to a constant (for the factorised priors of
:mod:`bayesflow.priors`, the constant is the fixed entries' log prior). So the restricted
log posterior equals the full one at the embedded point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

import torch
from torch import Tensor

from bayesflow.engines.base import Posterior, Problem
from bayesflow.errors import SpecError

__all__ = ["Embedding", "restrict_problem", "select_tensors"]


def select_tensors(
    patterns: Sequence[str], names: Sequence[str], where: str = "parameters"
) -> list[bool]:
    """Which tensors some glob pattern matches; a pattern that matches none is an error.

    Args:
        patterns: glob patterns of tensor names (``fnmatch``: ``*`` also matches dots).
        names: the model's tensor names, in flat order.
        where: the spec key the patterns come from, for messages.
    """
    if not patterns:
        raise SpecError(f"{where}: no patterns given; list the tensors to infer or drop the key")
    unmatched = [p for p in patterns if not any(fnmatchcase(name, p) for name in names)]
    if unmatched:
        raise SpecError(
            f"{where}: pattern(s) {unmatched} match no parameter tensor of the model; "
            f"its tensors are: {', '.join(names)}"
        )
    return [any(fnmatchcase(name, p) for p in patterns) for name in names]


@dataclass(frozen=True)
class Embedding:
    """Maps between a subset's flat space and the full one.

    Attributes:
        fixed: (d,) the full vector whose unselected entries stay fixed.
        index: (d_S,) the full-space positions of the selected entries, ascending.
        runs: contiguous runs of the full vector in order, as ``(selected, start, stop)``
            in the full vector's positions; a selected run's entries come next in the
            subset vector.
    """

    fixed: Tensor
    index: Tensor
    runs: tuple[tuple[bool, int, int], ...]

    def restrict(self, params: Tensor) -> Tensor:
        """The selected entries (..., d_S) of full vectors (..., d)."""
        return params.index_select(-1, self.index.to(params.device))

    def fill(self, params: Tensor, rest: Tensor | None = None) -> Tensor:
        """Full vectors (..., d): ``params`` (..., d_S) in place, ``rest`` elsewhere.

        Built by concatenating slices (not by indexed assignment) so it batches under
        ``torch.func.vmap`` and is differentiable in ``params``.
        """
        rest = self.fixed if rest is None else rest
        lead = params.shape[:-1]
        pieces, offset = [], 0
        for selected, start, stop in self.runs:
            if selected:
                pieces.append(params[..., offset : offset + stop - start])
                offset += stop - start
            else:
                pieces.append(rest[start:stop].to(params.dtype).expand(*lead, stop - start))
        return torch.cat(pieces, dim=-1)

    def __call__(self, posterior: Posterior) -> Posterior:
        """The subset posterior in full flat space; the fixed entries have no spread.

        Samples get the fixed values in every row; a Gaussian gets the fixed values as
        its mean there and zero variance (or zero rows and columns of its covariance).
        """
        if posterior.samples is not None:
            return dataclasses.replace(posterior, samples=self.fill(posterior.samples))
        assert posterior.mean is not None
        mean = self.fill(posterior.mean)
        if posterior.cov is not None:
            cov = mean.new_zeros(mean.shape[0], mean.shape[0])
            index = self.index.to(mean.device)
            cov[index.unsqueeze(-1), index] = posterior.cov
            return dataclasses.replace(posterior, mean=mean, cov=cov)
        assert posterior.var is not None
        var = self.fill(posterior.var, torch.zeros_like(self.fixed))
        kronecker = None if posterior.kronecker is None else posterior.kronecker.embed(self.index)
        return dataclasses.replace(posterior, mean=mean, var=var, kronecker=kronecker)


def restrict_problem(
    problem: Problem, full_params: Tensor, patterns: Sequence[str], where: str = "parameters"
) -> tuple[Problem, Embedding]:
    """The problem over the tensors matching ``patterns``, the rest fixed at ``full_params``.

    Args:
        problem: the full problem.
        full_params: (d,) values of every parameter; the unselected ones stay fixed.
        patterns: glob patterns of tensor names to infer (``["2.*"]``, ``["fc.*"]``).
        where: the spec key the patterns come from, for messages.

    Returns:
        The restricted problem (its flat vector is the selected entries only; its prior
        precision, names and shapes are restricted too) and the :class:`Embedding`,
        whose call maps a posterior of the restricted problem to the full space.

    Raises:
        SpecError: a pattern matches no tensor (the message lists the tensor names).
    """
    chosen = select_tensors(patterns, problem.param_names, where)
    runs = _runs(chosen, problem.param_shapes)
    pieces = [torch.arange(start, stop) for selected, start, stop in runs if selected]
    index = torch.cat(pieces).to(problem.device)
    embedding = Embedding(full_params.detach().to(problem.device), index, runs)

    def forward(params: Tensor, inputs: Tensor) -> Tensor:
        return problem.forward(embedding.fill(params), inputs)

    def log_prior(params: Tensor) -> Tensor:
        return problem.log_prior(embedding.fill(params))

    def init_params(generator: torch.Generator) -> Tensor:
        return embedding.restrict(problem.init_params(generator))

    subproblem = dataclasses.replace(
        problem,
        forward=forward,
        log_prior=log_prior,
        prior_precision=problem.prior_precision.index_select(0, index),
        dimension=int(index.numel()),
        param_names=tuple(n for n, keep in zip(problem.param_names, chosen) if keep),
        param_shapes=tuple(s for s, keep in zip(problem.param_shapes, chosen) if keep),
        init_params=init_params,
        module=None,  # its forward is not the module's over this vector
        parent=(problem, embedding),  # a layer-wise method (KFAC) finds the layers there
    )
    return subproblem, embedding


def _runs(
    chosen: Sequence[bool], shapes: Sequence[tuple[int, ...]]
) -> tuple[tuple[bool, int, int], ...]:
    """Merge consecutive tensors that are all selected (or all fixed) into runs."""
    runs: list[tuple[bool, int, int]] = []
    position = 0
    for selected, shape in zip(chosen, shapes):
        size = int(torch.Size(shape).numel())
        if runs and runs[-1][0] == selected:
            runs[-1] = (selected, runs[-1][1], position + size)
        else:
            runs.append((selected, position, position + size))
        position += size
    return tuple(runs)
