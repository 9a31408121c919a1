"""Hydra's multirun grammar: which overrides sweep, and the product they make."""

from __future__ import annotations

import pytest

from bayesflow.errors import SpecError
from bayesflow.spec.sweep import expand_sweeps, split_top_level


def test_commas_inside_brackets_and_quotes_do_not_split() -> None:
    """`[32,32],[64,64]` is two lists; a quoted comma is one value."""
    assert split_top_level("[32,32],[64,64]") == ["[32,32]", "[64,64]"]
    assert split_top_level("'a, b',c") == ["'a, b'", "c"]
    assert split_top_level("{x: 1, y: 2}") == ["{x: 1, y: 2}"]


def test_the_product_of_two_swept_keys() -> None:
    """Two values × two lists are four variants; unswept overrides go to every variant."""
    variants = expand_sweeps(["seeds=[0]", "prior.variance=0.1,1", "model.hidden=[32,32],[64,64]"])
    assert [variant.label for variant in variants] == [
        "prior.variance=0.1 model.hidden=[32,32]",
        "prior.variance=0.1 model.hidden=[64,64]",
        "prior.variance=1 model.hidden=[32,32]",
        "prior.variance=1 model.hidden=[64,64]",
    ]
    assert variants[0].overrides == ("seeds=[0]", "prior.variance=0.1", "model.hidden=[32,32]")


def test_choice_and_range() -> None:
    """choice() lists values; range() counts like Python's range."""
    assert [v.label for v in expand_sweeps(["methods.sghmc.lr=choice(0.01,0.1)"])] == [
        "methods.sghmc.lr=0.01", "methods.sghmc.lr=0.1",
    ]
    assert [v.values[0][1] for v in expand_sweeps(["data.split_seed=range(0,3)"])] == ["0", "1", "2"]
    assert [v.values[0][1] for v in expand_sweeps(["x=range(0,1,0.5)"])] == ["0.0", "0.5"]


def test_no_sweep_is_one_variant() -> None:
    """Plain overrides make one variant with no label."""
    (variant,) = expand_sweeps(["temperatures=[0.1,1]", "methods.vi.epochs=5"])
    assert variant.label == "" and variant.overrides == ("temperatures=[0.1,1]", "methods.vi.epochs=5")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["a=1,,2"], "an empty value in the sweep"),
        (["a=1,2", "a=3,4"], "the key is swept twice"),
        (["a=range(0)"], "expected range(start, stop)"),
        (["a=range(0,1000)"], "more than 256"),
        (["a=" + ",".join(map(str, range(20))), "b=" + ",".join(map(str, range(20)))], "400 variants"),
    ],
)
def test_bad_sweeps_say_what_to_fix(overrides: list[str], message: str) -> None:
    """Malformed or enormous sweeps are spec errors that say what is wrong."""
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        expand_sweeps(overrides)
