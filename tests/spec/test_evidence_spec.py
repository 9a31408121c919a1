"""`prior_variance: auto` and `noise_sd: auto` are refused where they cannot apply, at validate."""

from __future__ import annotations

from pathlib import Path

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec import load_spec
from tests.conftest import TINY_SPEC, write


def problems(path: Path, *overrides: str) -> list[str]:
    """The problems of a spec file with overrides (empty when it loads)."""
    try:
        load_spec(path, list(overrides))
    except SpecError as error:
        # Each problem is located: `<file>:<line>:<column>: <key>: <message>`.
        return [problem.removeprefix(f"{path}:").split(": ", 1)[1] for problem in error.problems]
    return []


def laplace_with(tmp_path: Path, settings: str, prior: str = "diag_normal", likelihood: str = "categorical") -> Path:
    """TINY_SPEC with ``settings`` added to its Laplace method (from line 23) and the blocks named."""
    spec = TINY_SPEC.replace("    from: map\n", f"    from: map\n{settings}")
    spec = spec.replace("  name: diag_normal\n  variance: 1.0\n", f"  name: {prior}\n")
    return write(tmp_path, spec.replace("name: categorical", f"name: {likelihood}"))


def test_auto_is_accepted_on_a_laplace_under_a_normal_prior(tmp_path: Path) -> None:
    """The bundled form validates, under diag_normal and he_normal."""
    path = write(tmp_path, TINY_SPEC)
    assert problems(path, "methods.laplace.prior_variance=auto") == []
    assert problems(path, "methods.laplace.prior_variance=auto", "prior={name: he_normal}") == []
    assert problems(path, "methods.laplace.prior_variance=auto_per_tensor") == []


@pytest.mark.parametrize("setting", ["auto", "auto_per_tensor"])
@pytest.mark.parametrize("prior", ["laplace", "none"])
def test_auto_under_a_non_normal_prior_is_refused(tmp_path: Path, prior: str, setting: str) -> None:
    """The evidence's closed form needs a normal prior; the message names the key and the fix."""
    path = laplace_with(tmp_path, f"    prior_variance: {setting}\n", prior=prior)
    found = problems(path)
    assert len(found) == 1
    assert found[0].startswith(f"methods.laplace.prior_variance: `{setting}` maximises the Laplace evidence")
    assert "use prior diag_normal or he_normal" in found[0]


def test_auto_on_a_method_that_is_not_laplace_is_refused(tmp_path: Path) -> None:
    """Only a Laplace method has the key: on SGHMC it is an unknown setting, located."""
    spec = TINY_SPEC.replace("    keep: last\n", "    keep: last\n    prior_variance: auto\n")
    found = problems(write(tmp_path, spec))
    assert len(found) == 1 and found[0].startswith("methods.sghmc.prior_variance")


def test_auto_in_the_prior_block_says_where_it_goes(tmp_path: Path) -> None:
    """`prior.variance: auto` (the MAP needs a number) points to the Laplace setting."""
    found = problems(write(tmp_path, TINY_SPEC.replace("variance: 1.0", "variance: auto")))
    assert len(found) == 1
    assert found[0].startswith("prior.variance:") and "`prior_variance: auto` under that method" in found[0]


def test_noise_auto_needs_a_gaussian_likelihood(tmp_path: Path) -> None:
    """A categorical likelihood has no noise to choose."""
    found = problems(laplace_with(tmp_path, "    prior_variance: auto\n    noise_sd: auto\n"))
    assert found == [(
        "methods.laplace.noise_sd: `auto` chooses a gaussian likelihood's noise sd, but "
        "`likelihood.name` is 'categorical'; drop it, or use `likelihood: {name: gaussian}`"
    )]


def test_noise_auto_needs_the_prior_chosen_with_it(tmp_path: Path) -> None:
    """The noise is chosen jointly with the prior variance."""
    found = problems(laplace_with(tmp_path, "    noise_sd: auto\n", likelihood="gaussian"))
    assert any(item.startswith("methods.laplace.noise_sd: `auto` chooses the noise together with the "
                               "prior; add `prior_variance: auto`") for item in found)
    both = laplace_with(tmp_path, "    prior_variance: auto\n    noise_sd: auto\n", likelihood="gaussian")
    assert not any("noise_sd" in item for item in problems(both))


def test_the_error_names_the_file_and_line(tmp_path: Path) -> None:
    """A located spec error: the file and the line of the offending key."""
    path = laplace_with(tmp_path, "    prior_variance: auto\n", prior="laplace")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert f"{path}:23:5: methods.laplace.prior_variance:" in str(caught.value)
