"""Every kind of spec mistake: YAML in a temporary folder, whole messages matched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bayesflow.errors import SpecError
from bayesflow.spec import load as load_module
from bayesflow.spec import load_spec
from bayesflow.spec import locations as locations_module
from bayesflow.spec.catalog import entries
from bayesflow.spec.load import MAX_SPEC_BYTES
from bayesflow.spec.locations import MAX_DEPTH, MAX_EVENTS
from tests.conftest import TINY_SPEC, write
from tests.spec.counting import Counting


def problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    """The problems load_spec reports for ``path``."""
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return info.value.problems


def names(kind: str) -> str:
    """The names a registry listing holds, as the messages list them."""
    return ", ".join(name for entry in entries(kind) for name in entry.names)


def edited(tmp_path: Path, old: str, new: str) -> Path:
    """Write the tiny spec with one edit (which must apply)."""
    assert old in TINY_SPEC
    return write(tmp_path, TINY_SPEC.replace(old, new, 1))


# ----------------------------------------------------------------- YAML that does not parse


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: a\ndata:\n\tname: x\n",
         ("3:1: YAML syntax error: a tab character; YAML indents with spaces, never tabs: "
         "replace the tab with spaces")),
        ("data:\n  name: x\n model: y\n",
         ("3:2: YAML syntax error: bad indentation: this line is not lined up with the keys of "
         "the mapping that starts at line 1, column 1; keys of one mapping start in the same "
         "column (indent with spaces)")),
        ("data:\n  name: x\n    split: 1\n",
         ("3:10: YAML syntax error: a `key: value` where none can start: indent it like its "
         "sibling keys, or quote a value that contains `: `")),
        ("seeds: [1, 2\nname: x\n",
         ("2:5: YAML syntax error: unclosed `[` opened at line 1, column 8: expected `,` or `]`, "
         "got ':'; close the bracket")),
        ("data: {name: x\n",
         ("2:1: YAML syntax error: unclosed `{` opened at line 1, column 7: expected `,` or `}`, "
         "got the end of the file; close the bracket")),
        ("name: 'tiny\nseeds: [0]\n",
         ("3:1: YAML syntax error: unclosed quote opened at line 1, column 7; close the string "
         "with the same quote")),
        ("name: a\n---\nname: b\n",
         ("2:1: YAML syntax error: the file holds more than one YAML document (`---`); a spec "
         "is one document")),
    ],
    ids=["tab", "dedent", "over-indent", "bracket", "brace", "quote", "two-documents"],
)
def test_yaml_syntax_errors_say_what_to_fix(tmp_path: Path, text: str, expected: str) -> None:
    """Tabs, bad indentation and unclosed brackets or quotes are located and explained."""
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:{expected}"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty; a spec is a YAML mapping of keys"),
        ("- a\n- b\n", "1:1: the document is a list; a spec is a YAML mapping (`name: ...`, `data: ...`, ...)"),
        ("just words\n", "1:1: the document is a str; a spec is a YAML mapping (`name: ...`, `data: ...`, ...)"),
        ("name: a\nname: b\n", "2:1: duplicate key 'name' (first defined at line 1); keep one of them"),
        ("a: !!python/object/apply:os.system ['echo hi']\n",
         ("1:4: the YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed in "
         "a workflow spec (tags that construct objects are refused); remove it")),
        ("base: &base {a: 1}\nother:\n  <<: *base\n",
         ("3:3: YAML merge keys (`<<`) are not supported in a workflow spec; use "
         "`extends: base.yaml`, or write the keys out")),
        ("? [a, b]\n: 1\n", "1:3: YAML error: a key is a list or a mapping; keys are plain names"),
    ],
    ids=["empty", "list", "scalar", "duplicate", "python-tag", "merge-key", "list-key"],
)
def test_documents_that_are_not_a_spec(tmp_path: Path, text: str, expected: str) -> None:
    """Empty, non-mapping, duplicate-key and unsafe documents are refused with a reason."""
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}:{expected}" if expected[0].isdigit() else f"{path}: {expected}"]


def test_very_large_file_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file past the size limit is refused before it is read: not one byte of it."""
    path = tmp_path / "spec.yaml"
    path.write_text("seeds: [" + ",".join(["0"] * (MAX_SPEC_BYTES // 2)) + "]\n")
    size = path.stat().st_size
    counting = Counting(os)
    monkeypatch.setattr(load_module, "os", counting)
    assert problems(path) == [
        (f"{path}: file is {size} bytes, more than the {MAX_SPEC_BYTES} a spec may have; "
        "is this the right file?")
    ]
    assert counting.bytes_read == 0


def test_long_document_under_the_size_limit_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A document of many small nodes stops at the node limit instead of being composed:
    of its 100,000 scalars the parser reads MAX_EVENTS and two, and nothing composes it."""
    scalars = 100_000
    path = write(tmp_path, "seeds: [" + ",".join(["0"] * scalars) + "]\n")
    assert path.stat().st_size <= MAX_SPEC_BYTES and scalars > 4 * MAX_EVENTS
    counting = Counting(yaml)
    monkeypatch.setattr(locations_module, "yaml", counting)
    (message,) = problems(path)
    # enumerate() counts from 0: the event numbered MAX_EVENTS + 1 is the first refused.
    assert counting.events == MAX_EVENTS + 2 and counting.composed == 0
    assert message.startswith(f"{path}:1:")
    assert message.endswith(
        f": the document has more than {MAX_EVENTS} YAML nodes; a workflow spec has a few "
        "hundred: is this the right file?"
    )


def test_deep_nesting_is_refused_without_recursion_error(tmp_path: Path) -> None:
    """Ten thousand nested brackets are a located error, not a RecursionError."""
    path = write(tmp_path, "seeds: " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert problems(path) == [
        (f"{path}:1:{MAX_DEPTH + 7}: nesting deeper than {MAX_DEPTH} levels; a workflow spec "
        "is far shallower")
    ]


def test_unquoted_date_is_kept_as_text(tmp_path: Path) -> None:
    """YAML's implicit timestamps are read as the text written, not refused."""
    path = edited(tmp_path, "description: a tiny workflow for tests", "description: 2024-01-31")
    assert load_spec(path).spec.description == "2024-01-31"


def test_key_that_yaml_reads_as_a_value(tmp_path: Path) -> None:
    """`on:` or `~:` keys are values to YAML; the message says to quote them."""
    path = edited(tmp_path, "  hidden: [8]", "  hidden: [8]\n  ~: 3")
    assert problems(path) == [
        (f"{path}:6:1: model.null: expected a string key, got null (YAML reads unquoted numbers, "
        "true/false/yes/no/on/off and ~ as values, not names); quote the key")
    ]


# ------------------------------------------------------------------ unknown names and keys


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        ("name: mlp", "name: mpl", "7:3: model.name", "unknown model 'mpl'; did you mean 'mlp'? (expected one of: {models})"),
        ("name: sklearn_digits", "name: sklearn_digit", "4:3: data.name",
         "unknown dataset 'sklearn_digit'; did you mean 'sklearn_digits'? (expected one of: {datasets})"),
        ("name: categorical", "name: categoricl", "10:3: likelihood.name",
         "unknown likelihood 'categoricl'; did you mean 'categorical'? (expected one of: {likelihoods})"),
        ("name: diag_normal", "name: diag_normla", "12:3: prior.name",
         "unknown prior 'diag_normla'; did you mean 'diag_normal'? (expected one of: {priors})"),
    ],
    ids=["model", "dataset", "likelihood", "prior"],
)
def test_unknown_registry_names_suggest_the_closest(
    tmp_path: Path, old: str, new: str, where: str, message: str
) -> None:
    """A misspelt model, dataset, likelihood or prior points at its `name` line."""
    path = edited(tmp_path, old, new)
    listed = {kind: names(kind) for kind in ("models", "datasets", "likelihoods", "priors")}
    assert problems(path) == [f"{path}:{where}: {message.format(**listed)}"]


def test_unknown_plot_suggests_the_closest(tmp_path: Path) -> None:
    """Plots are a fixed list; a misspelt one gets the closest plot and the list."""
    path = edited(tmp_path, "evaluate:", "plots: [nll_vs_temperature, acuracy_vs_temperature]\nevaluate:")
    assert problems(path) == [
        (f"{path}:30:29: plots.1: unknown plot 'acuracy_vs_temperature'; did you mean "
        "'accuracy_vs_temperature'? (expected one of: nll_vs_temperature, "
        "accuracy_vs_temperature, ece_vs_temperature, brier_vs_temperature, "
        "rmse_vs_temperature, coverage_vs_temperature)")
    ]


def test_unknown_choice_suggests_the_closest(tmp_path: Path) -> None:
    """A misspelt choice among fixed values is located with a suggestion."""
    path = edited(tmp_path, "  hidden: [8]", "  hidden: [8]\n  activation: rleu")
    assert problems(path) == [
        (f"{path}:9:3: model.activation: expected one of: relu, tanh, gelu, got 'rleu'; "
        "did you mean 'relu'?")
    ]


def test_unknown_nested_key(tmp_path: Path) -> None:
    """A misspelt key deep inside a method names its path and the allowed keys."""
    path = edited(tmp_path, "    optimizer: {name: adam, lr: 0.01}", "    optimizer: {name: adam, momentun: 0.9}")
    assert problems(path) == [
        (f"{path}:19:29: methods.map.optimizer.momentun: unknown key `momentun`; did you mean `momentum`? "
        "(allowed: name, lr, momentum, weight_decay, schedule)")
    ]


def test_missing_engine_lists_the_engines(tmp_path: Path) -> None:
    """A method without `engine` says to add one and lists them."""
    path = edited(tmp_path, "    engine: laplace_diag_ggn\n", "")
    assert problems(path) == [
        f"{path}:21:3: methods.laplace: missing `engine`; add one of: {names('engines')}"
    ]


def test_missing_required_key(tmp_path: Path) -> None:
    """A required section left out is named."""
    path = edited(tmp_path, "likelihood:\n  name: categorical\n", "")
    assert problems(path) == [f"{path}:1:1: likelihood: required key `likelihood` is missing; add it"]


# ---------------------------------------------------------------- wrong types and ranges


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("epochs: 3\n  laplace", "epochs: ten\n  laplace", "20:5: methods.map.epochs: expected an integer, got 'ten'"),
        ("epochs: 3\n  laplace", "epochs: 2.5\n  laplace", "20:5: methods.map.epochs: expected an integer, got 2.5"),
        ("epochs: 3\n  laplace", "epochs: 0\n  laplace", "20:5: methods.map.epochs: expected a value greater than 0, got 0"),
        ("temperatures: [0.1, 1.0]", "temperatures: [-0.1, 1.0]",
         "14:16: temperatures.0: expected a value greater than or equal to 0, got -0.1"),
        ("temperatures: [0.1, 1.0]", "temperatures: [0.1, 1.0, 0.1]",
         "14:1: temperatures: expected unique temperatures, got 0.1 more than once; remove the repeats"),
        ("temperatures: [0.1, 1.0]", "temperatures: []", "14:1: temperatures: expected at least 1 item, got []"),
        ("temperatures: [0.1, 1.0]", "temperatures: [.inf]",
         "14:1: temperatures: expected finite temperatures, got inf; T = 1 is the Bayes posterior"),
        ("temperatures: [0.1, 1.0]", "temperatures: cold", "14:1: temperatures: expected a list, got 'cold'"),
        ("seeds: [0]", "seeds: [0, 1, 1]", "15:1: seeds: expected unique seeds, got 1 more than once; remove the repeats"),
        ("  hidden: [8]", "  hidden: 8", "8:3: model.hidden: expected a list, got 8"),
        ("model:\n  name: mlp\n  hidden: [8]", "model: mlp", "6:1: model: expected a mapping, got 'mlp'"),
        ("  test_fraction: 0.5", "  test_fraction: 2", "5:3: data.test_fraction: expected a value less than 1, got 2"),
        ("name: tiny", "name: 'a b'", "1:1: name: expected a string matching '^[A-Za-z0-9_][A-Za-z0-9_.-]*$', got 'a b'"),
    ],
    ids=["word-for-int", "float-for-int", "zero-epochs", "negative-temperature",
         "duplicate-temperature", "empty-grid", "infinite-temperature", "scalar-for-list",
         "duplicate-seed", "int-for-list", "string-for-mapping", "out-of-range", "pattern"],
)
def test_wrong_types_and_ranges(tmp_path: Path, old: str, new: str, expected: str) -> None:
    """A wrong type or an out-of-range value says what was expected and what was found."""
    path = edited(tmp_path, old, new)
    assert problems(path) == [f"{path}:{expected}"]


# --------------------------------------------------------------------- cross-field problems


def test_from_naming_no_method(tmp_path: Path) -> None:
    """`from:` must name another method."""
    path = edited(tmp_path, "    from: map", "    from: mpa")
    assert problems(path) == [
        (f"{path}:23:5: methods.laplace.from: names 'mpa', which is not a method "
        "(methods: map, laplace, sghmc)")
    ]


def test_gaussian_likelihood_on_a_classification_dataset(tmp_path: Path) -> None:
    """A regression likelihood on digits is caught without loading any data."""
    path = edited(tmp_path, "name: categorical", "name: gaussian")
    assert problems(path) == [
        (f"{path}:10:3: likelihood.name: `gaussian` is for a real-valued target, but "
        "sklearn_digits is a classification dataset (10 classes); use `categorical`")
    ]


def test_bernoulli_likelihood_on_ten_classes(tmp_path: Path) -> None:
    """A binary likelihood on a ten-class dataset names the fix."""
    path = edited(tmp_path, "name: categorical", "name: bernoulli")
    assert problems(path) == [
        (f"{path}:10:3: likelihood.name: `bernoulli` needs a binary target (0/1), but "
        "sklearn_digits has 10 classes; use `categorical`")
    ]


CSV_DATA = "data:\n  name: csv\n  path: table.csv\n  target: {target}\n"


def csv_spec(tmp_path: Path, target: str, likelihood: str) -> Path:
    """The tiny spec on a small CSV file with a real-valued and an integer column."""
    rows = ["x,height,label"] + [f"{i},{1.5 + i / 7:.3f},{i % 2}" for i in range(12)]
    (tmp_path / "table.csv").write_text("\n".join(rows) + "\n")
    text = TINY_SPEC.replace("data:\n  name: sklearn_digits\n  test_fraction: 0.5\n", CSV_DATA.format(target=target))
    return write(tmp_path, text.replace("name: categorical", f"name: {likelihood}"))


@pytest.mark.parametrize("likelihood", ["categorical", "bernoulli"])
def test_classification_likelihood_on_a_real_valued_csv_target(tmp_path: Path, likelihood: str) -> None:
    """A class likelihood on a real-valued csv column is found by reading that column."""
    path = csv_spec(tmp_path, "height", likelihood)
    assert problems(path) == [
        (f"{path}:11:3: likelihood.name: `{likelihood}` needs integer class labels, but the target "
        "column 'height' of table.csv is real-valued; use `gaussian`, or a target column of "
        "class labels 0, 1, ...")
    ]


def test_matching_csv_target_loads(tmp_path: Path) -> None:
    """An integer 0/1 column with a bernoulli likelihood, or a real one with gaussian, loads."""
    assert load_spec(csv_spec(tmp_path, "label", "bernoulli")).spec.likelihood.name == "bernoulli"
    assert load_spec(csv_spec(tmp_path, "height", "gaussian")).spec.likelihood.name == "gaussian"


def test_csv_target_column_missing(tmp_path: Path) -> None:
    """A target that is not a column points at `data.target` and lists the columns."""
    path = csv_spec(tmp_path, "heigth", "gaussian")
    assert problems(path) == [
        f"{path}:6:3: data.target: column 'heigth' is not in table.csv (columns: x, height, label)"
    ]


def test_csv_file_missing(tmp_path: Path) -> None:
    """A data file that does not exist points at `data.path`."""
    path = csv_spec(tmp_path, "height", "gaussian")
    (tmp_path / "table.csv").unlink()
    assert problems(path) == [
        f"{path}:5:3: data.path: file {str(tmp_path / 'table.csv')!r} does not exist; fix the path"
    ]


# ---------------------------------------------------------------------------- interpolation


def test_interpolation_errors_are_all_located(tmp_path: Path) -> None:
    """Every interpolation that points nowhere is reported at the key holding it."""
    text = TINY_SPEC.replace("description: a tiny workflow for tests", "description: ${data.nme}")
    path = write(tmp_path, text.replace("epochs: 3\n  laplace", "epochs: ${evaluate.n_sample}\n  laplace"))
    assert problems(path) == [
        (f"{path}:2:1: description: the interpolation '${{data.nme}}' points nowhere: the spec "
        "has no key `data.nme`; did you mean `data.name`?"),
        (f"{path}:20:5: methods.map.epochs: the interpolation '${{evaluate.n_sample}}' points "
        "nowhere: the spec has no key `evaluate.n_sample`; did you mean `evaluate.n_samples`?"),
    ]


def test_interpolation_that_does_not_parse(tmp_path: Path) -> None:
    """A malformed `${` is located and says how to write a literal one."""
    path = edited(tmp_path, "description: a tiny workflow for tests", "description: 'cost ${'")
    assert problems(path) == [
        (f"{path}:2:1: description: the interpolation in 'cost ${{' does not parse (no viable "
        "alternative at input '${'); write `${key.path}`, or escape a literal `${` as `\\${`")
    ]


def test_interpolation_cycle(tmp_path: Path) -> None:
    """An interpolation of itself is reported, not resolved forever."""
    path = edited(tmp_path, "description: a tiny workflow for tests", "description: ${description}")
    assert problems(path) == [
        (f"{path}:2:1: description: the interpolation '${{description}}' failed: Recursive "
        "interpolation detected")
    ]
