"""Why a stage is stale, in one short line: no JSON fragments, no list of every input."""

from __future__ import annotations

from bayesflow.dag.changes import describe_change
from bayesflow.dag.plan import Stage


def _stage(config: dict, inputs: tuple[str, ...] = ()) -> Stage:
    return Stage(name="report", kind="report", key="k", config=config, inputs=inputs)


def test_a_stage_of_many_inputs_names_the_one_that_changed() -> None:
    """The report's inputs by name: the changed one is named, not all 60."""
    names = tuple(f"evaluate/sghmc_with_a_long_name/T={t}/seed={s}" for t in range(10) for s in range(6))
    before = {"inputs": {name: "a" for name in names}}
    after = {"inputs": {**before["inputs"], names[7]: "b"}}
    assert describe_change(_stage(after, names), before) == f"input {names[7]} changed"
    unnamed = describe_change(_stage({"inputs": ["b", *"a" * 59]}, names), {"inputs": ["a"] * 60})
    assert unnamed == "an input changed (of 60)"


def test_a_changed_mapping_or_list_is_not_shown_as_json_and_the_line_stays_short() -> None:
    """Nested settings show their size; at most two changes and a count of the rest."""
    before = {"method": {"optimizer": {"name": "adam", "lr": 0.01, "schedule": {"kind": "cosine", "warmup": 5}},
                         "hidden": [256, 256, 256], "epochs": 3, "notes": "x" * 300, "seed": 1}}
    after = {"method": {"optimizer": {"name": "sgd"}, "hidden": [8], "epochs": 4, "notes": "y" * 300, "seed": 2}}
    stage = Stage(name="fit/a/T=1/seed=0", kind="fit", key="k", config=after, inputs=(), method="a")
    reason = describe_change(stage, before)
    assert "{" not in reason and "[" not in reason and len(reason) <= 120, reason
    assert reason.endswith("more")
