"""`evaluate.statements`: the statement sets read with the data (in-distribution file, a
cipher or a file out of it), refused for a model that is not a language model, and their
digest in every evaluation's key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bayesflow.dag.plan import plan_workflow
from bayesflow.data import Dataset
from bayesflow.data.reference import reference_digest
from bayesflow.data.statements import statement_sets
from bayesflow.errors import SpecError
from bayesflow.llm.statements import cipher
from bayesflow.spec import load_spec
from bayesflow.spec.statements import StatementsSpec

DIGITS = """\
name: statements_on_digits
data: {name: sklearn_digits}
model: {name: mlp, hidden: [4]}
likelihood: {name: categorical}
prior: {name: diag_normal}
temperatures: [1.0]
methods:
  map: {engine: map, epochs: 1}
evaluate:
  statements: {in_distribution: facts.txt}
plots: []
report: {enabled: false}
"""
FACTS = "# facts\nIce is frozen water.\n\nThe Moon orbits the Earth.\n"


def test_statements_are_refused_for_a_model_that_is_not_a_language_model(tmp_path: Path) -> None:
    """A located spec error at evaluate.statements naming the model and the fix."""
    (tmp_path / "spec.yaml").write_text(DIGITS)
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "spec.yaml")
    (problem,) = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'spec.yaml'}:10:3: evaluate.statements: ")
    assert "`model.name` is 'mlp'; use `model: {name: causal_lm, ...}`" in problem


def test_the_ood_set_is_the_cipher_of_the_statements_or_a_file(tmp_path: Path) -> None:
    (tmp_path / "facts.txt").write_text(FACTS)
    (tmp_path / "other.txt").write_text("Le ciel est bleu.\n")
    settings = StatementsSpec(in_distribution="facts.txt", cipher_seed=3)
    inside, outside = statement_sets(settings, tmp_path)
    assert inside == ("Ice is frozen water.", "The Moon orbits the Earth.")
    assert list(outside) == cipher(list(inside), 3)
    settings = StatementsSpec(in_distribution="facts.txt", ood="other.txt")
    assert statement_sets(settings, tmp_path)[1] == ("Le ciel est bleu.",)


@pytest.mark.parametrize(("key", "content", "expected"), [
    ("in_distribution", None, "evaluate.statements.in_distribution: no file"),
    ("in_distribution", b"# nothing\n", "evaluate.statements.in_distribution: '"),
    ("ood", b"fine line.\n\xfe\n", "evaluate.statements.ood: '"),
])
def test_a_file_that_cannot_serve_is_a_spec_error_naming_its_key(
    tmp_path: Path, key: str, content: bytes | None, expected: str
) -> None:
    """A SpecError (not a DataError) whose problem starts with the key, so that the loader
    points at the key's line."""
    (tmp_path / "facts.txt").write_text(FACTS)
    if content is not None:
        (tmp_path / "bad.txt").write_bytes(content)
    settings = StatementsSpec(**{"in_distribution": "facts.txt", "ood": "cipher", key: "bad.txt"})
    with pytest.raises(SpecError) as caught:
        statement_sets(settings, tmp_path)
    assert type(caught.value) is SpecError
    assert caught.value.problems[0].startswith(expected)


def dataset(**fields: object) -> Dataset:
    rows = np.arange(8.0).reshape(4, 2)
    return Dataset(rows, np.arange(4) % 2, rows, np.arange(4) % 2, "classification", 2, **fields)


def test_the_digest_covers_the_statements_and_leaves_a_reference_only_digest_alone() -> None:
    """No statements and no reference: None; statements alone or beside a reference give a
    digest that changes with them; a reference alone keeps the digest it had."""
    plain, reference = dataset(), np.full((4, 2), 0.5)
    assert reference_digest(plain) is None
    one = reference_digest(dataset(statements=(("A b c.",), ("X y z.",))))
    two = reference_digest(dataset(statements=(("A b d.",), ("X y z.",))))
    assert one is not None and two is not None and one != two
    alone = reference_digest(dataset(reference=reference))
    both = reference_digest(dataset(reference=reference, statements=(("A b c.",), ("X y z.",))))
    assert alone is not None and both not in (None, alone, one)
    assert reference_digest(replace(dataset(reference=reference))) == alone


def test_the_evaluations_keys_change_with_the_statements_and_the_fits_do_not() -> None:
    """The digest of the statements is part of every evaluation's key, not of a fit's."""
    spec = load_spec({"name": "keys", "data": {"name": "sklearn_digits"}, "model": {"name": "mlp"},
                      "likelihood": {"name": "categorical"}, "prior": {"name": "diag_normal"}, "temperatures": [1.0],
                      "methods": {"map": {"engine": "map"}}, "plots": [],
                      "report": {"enabled": False}}).spec
    with_statements = spec.model_copy(update={"evaluate": spec.evaluate.model_copy(
        update={"statements": StatementsSpec()})})
    plans = [plan_workflow(with_statements, "data", reference_digest=digest).stages for digest in ("a", "b")]
    assert plans[0]["fit/map/T=shared/seed=0"].key == plans[1]["fit/map/T=shared/seed=0"].key
    assert plans[0]["evaluate/map/T=shared/seed=0"].key != plans[1]["evaluate/map/T=shared/seed=0"].key
    with pytest.raises(ValueError, match="evaluate.statements needs its digest"):
        plan_workflow(with_statements, "data")
