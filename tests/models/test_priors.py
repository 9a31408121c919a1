"""Priors: per-tensor variances by pattern and fan-in, densities and precisions."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Laplace, Normal

from bayesflow.errors import SpecError
from bayesflow.likelihoods import categorical
from bayesflow.models import mlp
from bayesflow.priors import PRIORS, build_prior, diag_normal, he_normal, laplace, none
from bayesflow.problem import build_problem

# An MLP 3 → 4 → 2: tensors 0.weight (4, 3), 0.bias (4,), 2.weight (2, 4), 2.bias (2,).
NAMES = ("0.weight", "0.bias", "2.weight", "2.bias")
SHAPES = ((4, 3), (4,), (2, 4), (2,))
SIZES = (12, 4, 8, 2)


def per_tensor(values: torch.Tensor) -> list[torch.Tensor]:
    """Split a flat (d,) vector into the four tensors' entries."""
    return list(values.split(SIZES))


def test_one_variance_everywhere() -> None:
    """diag_normal with one variance gives every entry that variance."""
    bound = diag_normal(0.25).bind(NAMES, SHAPES)
    torch.testing.assert_close(bound.values, torch.full((26,), 0.25))
    torch.testing.assert_close(bound.precision, torch.full((26,), 4.0))


def test_variances_by_pattern_first_match_wins() -> None:
    """Each tensor takes the variance of the first pattern its name matches."""
    prior = diag_normal({"*.bias": 1.0, "2.*": 0.5, "*": 0.1})
    pieces = per_tensor(prior.bind(NAMES, SHAPES).values)
    for piece, expected in zip(pieces, (0.1, 1.0, 0.5, 1.0)):
        torch.testing.assert_close(piece, torch.full_like(piece, expected))


def test_pattern_matching_no_tensor_lists_the_names() -> None:
    """A pattern that matches nothing is an error naming the model's tensors."""
    with pytest.raises(SpecError) as caught:
        diag_normal({"fc.*": 1.0, "*": 0.1}).bind(NAMES, SHAPES)
    assert caught.value.problems == [
        (
            "prior.variance: pattern(s) ['fc.*'] match no parameter tensor of the model; "
            "its tensors are: 0.weight, 0.bias, 2.weight, 2.bias"
        )
    ]


def test_tensor_matching_no_pattern_asks_for_a_catch_all() -> None:
    """A tensor no pattern covers is an error suggesting a catch-all."""
    with pytest.raises(SpecError, match="'0.weight' matches none of the patterns.*'\\*': 1.0"):
        diag_normal({"*.bias": 1.0, "2.*": 0.5}).bind(NAMES, SHAPES)


def test_he_normal_variances_follow_fan_in() -> None:
    """he_normal gives weights scale / fan_in and biases bias_variance."""
    pieces = per_tensor(he_normal(scale=2.0, bias_variance=0.3).bind(NAMES, SHAPES).values)
    for piece, expected in zip(pieces, (2.0 / 3, 0.3, 2.0 / 4, 0.3)):
        torch.testing.assert_close(piece, torch.full_like(piece, expected))


def test_he_normal_fan_in_of_a_convolution() -> None:
    """A conv weight (out, in, kh, kw) has fan-in in·kh·kw."""
    bound = he_normal(scale=1.0).bind(("conv.weight",), ((8, 3, 5, 5),))
    torch.testing.assert_close(bound.values, torch.full((600,), 1.0 / 75))


def test_normal_log_density_matches_torch() -> None:
    """The per-layer normal log density is the sum of torch's Normal log densities."""
    prior = diag_normal({"*.bias": 2.0, "*": 0.1})
    params = torch.randn(26, generator=torch.Generator().manual_seed(0))
    scales = prior.bind(NAMES, SHAPES).values.sqrt()
    expected = Normal(torch.zeros(26), scales).log_prob(params).sum()
    torch.testing.assert_close(prior.log_prob(params, NAMES, SHAPES), expected)


def test_laplace_log_density_matches_torch() -> None:
    """The Laplace prior's log density is torch.distributions.Laplace's, summed."""
    params = torch.randn(26, generator=torch.Generator().manual_seed(1))
    expected = Laplace(0.0, 0.7).log_prob(params).sum()
    torch.testing.assert_close(laplace(0.7).log_prob(params, NAMES, SHAPES), expected)


def test_laplace_precision_is_that_of_the_normal_with_its_variance() -> None:
    """The Laplace prior's precision is 1 / (2b²), the inverse of its variance."""
    precision = laplace(0.5).precision(NAMES, SHAPES)
    torch.testing.assert_close(precision, torch.full((26,), 1.0 / (2 * 0.5**2)))
    assert math.isclose(1.0 / float(precision[0]), float(Laplace(0.0, 0.5).variance))


def test_flat_prior_has_zero_density_and_precision() -> None:
    """`none` has log density 0 and no precision."""
    params = torch.randn(26)
    assert float(none().log_prob(params, NAMES, SHAPES)) == 0.0
    torch.testing.assert_close(none().precision(NAMES, SHAPES), torch.zeros(26))


def test_log_prob_batches_over_leading_axes() -> None:
    """A batch of vectors (k, d) gets one log density per vector."""
    params = torch.randn(3, 26)
    for prior in (diag_normal(0.5), laplace(1.0), none()):
        batched = prior.log_prob(params, NAMES, SHAPES)
        looped = torch.stack([prior.log_prob(row, NAMES, SHAPES) for row in params])
        torch.testing.assert_close(batched, looped)


def test_problem_uses_per_tensor_prior() -> None:
    """build_problem binds the prior to the module's tensors."""
    prior = diag_normal({"*.bias": 1.0, "*": 0.1})
    problem = build_problem(mlp(3, 2, hidden=[4]), categorical(), prior, 10)
    params = torch.randn(26)
    torch.testing.assert_close(problem.log_prior(params), prior.log_prob(params, NAMES, SHAPES))
    torch.testing.assert_close(problem.prior_precision, prior.precision(NAMES, SHAPES))


def test_build_prior_from_a_spec_section() -> None:
    """A spec's prior mapping builds the registered prior with its options."""
    prior = build_prior({"name": "he_normal", "scale": 1.0, "bias_variance": 0.5})
    assert prior.name == "he_normal"
    torch.testing.assert_close(prior.precision(("b",), ((3,),)), torch.full((3,), 2.0))


def test_registry_matches_the_spec() -> None:
    """Every prior a spec can name is registered, and every registered prior can be named."""
    from typing import get_args

    from bayesflow.spec.blocks import PriorSpec

    union = get_args(PriorSpec)[0]
    named = {get_args(spec.model_fields["name"].annotation)[0] for spec in get_args(union)}
    assert named == set(PRIORS.names())


@pytest.mark.parametrize("prior", [diag_normal(0.25), laplace(0.3)], ids=["normal", "laplace"])
def test_compact_binding_of_one_value_is_a_view_of_one_number(prior: object) -> None:
    """``bind(compact=True)`` with one value for every tensor: ``values`` and
    ``precision`` are stride-0 views with the full binding's entries, the same density
    (against torch.distributions too) and normalising constant; ``scaled`` keeps them
    views with the entries of ``vector * factor``."""
    from bayesflow.priors import scaled

    full = prior.bind(NAMES, SHAPES, torch.float64)  # type: ignore[attr-defined]
    compact = prior.bind(NAMES, SHAPES, torch.float64, compact=True)  # type: ignore[attr-defined]
    assert compact.precision.stride() == (0,) and compact.values.stride() == (0,)
    assert torch.equal(compact.precision, full.precision) and torch.equal(compact.values, full.values)
    assert compact.constant == pytest.approx(full.constant, rel=1e-14)
    params = torch.randn(3, sum(SIZES), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(compact.log_prob(params), full.log_prob(params), rtol=1e-14, atol=1e-12)
    reference = (Normal(0.0, 0.5) if compact.family == "normal" else Laplace(0.0, 0.3)).log_prob(params).sum(-1)
    torch.testing.assert_close(compact.log_prob(params), reference)
    half = scaled(compact.precision, -0.5)
    assert half.stride() == (0,) and torch.equal(half, -0.5 * full.precision)
    assert torch.equal(scaled(full.precision, -0.5), -0.5 * full.precision)


def test_compact_binding_of_several_values_stays_full() -> None:
    """Variances by pattern differ across tensors: ``compact`` binds them in full."""
    prior = diag_normal({"*.bias": 1.0, "*": 0.1})
    compact = prior.bind(NAMES, SHAPES, compact=True)
    assert compact.precision.stride() == (1,)
    assert torch.equal(compact.precision, prior.bind(NAMES, SHAPES).precision)
