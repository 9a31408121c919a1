"""What a user writes, hostile or careless, ends in a located message with exit code 3
at ``validate`` and at ``run``, never in merged cells, a traceback, an exit 0 that did
nothing or a message of unbounded length: swept values that would share a name, user code
that does not import, exits or hangs, and data files that are not text."""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.helpers import entries, invoke, workflow
from tests.data.tables import TABLE_SPEC, good_rows, write_table

TEMPERED = TABLE_SPEC.replace(
    "    optimizer: {name: adam, lr: 0.01}\n    epochs: 2\n", "    optimizer: {name: adam, lr: 0.01}\n    epochs: 2\n"
    "  sghmc: {engine: sghmc, lr: 0.01, epochs: 1, chains: 2, keep: last}\n",
)


def last_error(output: str) -> str:
    """What a command printed from its ``error:`` on."""
    return output[output.index("error:"):]


# ------------------------------------------------ 1. swept values that would share a name


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        ("[0.1, 0.1000000001]", "temperatures[0] = 0.1 and temperatures[1] = 0.1000000001 would share the label T=0.1"),
        ("[1e-7, 1.0000001e-7]", "temperatures[0] = 1e-07 and temperatures[1] = 1.0000001e-07 would share the label T=1e-07"),
        ("[0.1, 1e-1]", "expected unique temperatures, got 0.1 more than once"),
    ],
)
def test_temperatures_that_would_share_a_name_are_refused(grid: str, expected: str, tmp_path: Path) -> None:
    """Two temperatures that print alike (or are one value written twice) are refused at
    validate and at run, the line and key named, nothing computed."""
    write_table(tmp_path, good_rows(), spec=TEMPERED.replace("temperatures: [1.0]", f"temperatures: {grid}"))
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output
    assert f"spec.yaml:14:1: temperatures: {expected}" in validated.output
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 3 and last_error(run.output) == last_error(validated.output)
    assert entries(tmp_path) == []


@pytest.mark.slow
def test_close_temperatures_keep_a_cell_each(tmp_path: Path) -> None:
    """Temperatures that differ within the printed digits keep distinct stage names, keys,
    MLflow params and rows of the results table: a cell each, none merged."""
    from mlflow.tracking import MlflowClient

    grid = [1e-7, 1.00001e-7]
    workflow(tmp_path, TEMPERED.replace("temperatures: [1.0]", f"temperatures: {grid}"))
    planned = invoke(tmp_path, "plan", "spec.yaml", "--json")
    assert planned.exit_code == 0, planned.output
    rows = json.loads(planned.output[planned.output.index("["):])
    fits = {row["stage"]: row["key"] for row in rows if row["stage"].startswith("fit/sghmc/")}
    assert sorted(fits) == ["fit/sghmc/T=1.00001e-07/seed=0", "fit/sghmc/T=1e-07/seed=0"]
    assert len(set(fits.values())) == 2
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 0, run.output
    shown = re.findall(r"│ sghmc\s+│\s+(\S+) │", run.output)  # the results table, a row each
    assert shown == ["1e-07", "1.00001e-07"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("table")
    logged = [
        float(child.data.params["temperature"]) for child in client.search_runs([experiment.experiment_id])
        if child.data.tags.get("bayesflow.role") == "fit" and child.data.params.get("method") == "sghmc"
    ]
    assert sorted(logged) == grid


def test_sweep_values_equal_once_read_are_refused(tmp_path: Path) -> None:
    """A sweep over `0.1,1e-1` is one variant written twice: refused at validate -m and
    run -m, naming both variants and the swept key."""
    write_table(tmp_path, good_rows())
    validated = invoke(tmp_path, "validate", "spec.yaml", "-m", "prior.variance=0.1,1e-1")
    assert validated.exit_code == 3, validated.output
    assert (
        "variants 1 (prior.variance=0.1) and 2 (prior.variance=1e-1) of 2 are the same spec once "
        "their values are read (swept: prior.variance)"
    ) in validated.output
    run = invoke(tmp_path, "run", "spec.yaml", "-m", "prior.variance=0.1,1e-1")
    assert run.exit_code == 3 and last_error(run.output) == last_error(validated.output)
    assert invoke(tmp_path, "validate", "spec.yaml", "-m", "prior.variance=0.1,0.2").exit_code == 0


# --------------------------------------------------------- 2. user code that misbehaves

MODEL_SPEC = TABLE_SPEC.replace("  name: mlp\n  hidden: [4]", "  name: python\n  python: {module}:make")
DATA_SPEC = TABLE_SPEC.replace(
    "  name: csv\n  path: table.csv\n  target: y", "  name: python\n  module: loader.py\n  function: load"
)
FACTORY = "def make(num_features, num_outputs):\n    import torch\n    return torch.nn.Linear(num_features, num_outputs)\n"
MODELS = {
    "a SyntaxError": ("import torch\n\ndef make(num_features, num_outputs:\n    return 1\n",
                      "importing module '{module}' failed: SyntaxError at {file}:3 `def make(num_features, num_outputs:`"),
    "a missing dependency": ("import no_such_dependency_of_mine\n" + FACTORY,
                             "importing it failed: No module named 'no_such_dependency_of_mine' at {file}:1 in <module>"),
    "an exception at import": ("SETTINGS = {}\nWIDTH = SETTINGS['width']\n" + FACTORY,
                               "importing module '{module}' raised KeyError: 'width' at {file}:2 in <module>: `WIDTH = SETTINGS['width']`"),
    "sys.exit at import": ("import sys\nsys.exit(0)\n" + FACTORY,
                           "importing module '{module}' called sys.exit(0) at {file}:2 in <module>: `sys.exit(0)`"),
    "sys.exit in the factory": ("import sys\n\ndef make(num_features, num_outputs):\n    sys.exit('no model today')\n",
                                "called sys.exit('no model today') at {file}:4 in make"),
    "an endless loop at import": ("COUNT = 0\nwhile True:\n    COUNT += 1\n" + FACTORY,
                                  "importing module '{module}' did not return within 1 s; it was stopped at {file}:"),
    "an endless loop in the factory": ("def make(num_features, num_outputs):\n    while True:\n        pass\n",
                                       "did not return within 1 s; it was stopped at {file}:"),
}


@pytest.fixture
def user_module(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module name of this test's own (imports are cached per process), removed after."""
    name = f"user_net_{abs(hash(request.node.name)) % 10**8}"
    monkeypatch.setenv("BAYESFLOW_USER_CODE_TIMEOUT", "1")
    yield name
    sys.modules.pop(name, None)


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
@pytest.mark.parametrize("case", sorted(MODELS))
def test_a_python_model_that_misbehaves_is_a_located_spec_error(case: str, user_module: str, tmp_path: Path) -> None:
    """A model module that does not import, exits or never returns is refused at validate
    (exit 3): the spec's line and key, the user's file and line, no traceback."""
    source, expected = MODELS[case]
    file = tmp_path / f"{user_module}.py"
    file.write_text(source)
    write_table(tmp_path, good_rows(), spec=MODEL_SPEC.replace("{module}", user_module))
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output
    assert "spec.yaml:8:3: model.python: " in validated.output
    assert expected.format(module=user_module, file=file) in validated.output
    assert "Traceback" not in validated.output and "valid (" not in validated.output


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
def test_a_run_whose_model_exits_stops_before_any_stage(user_module: str, tmp_path: Path) -> None:
    """`run` refuses a model module that calls sys.exit as validate does (exit 3, not a
    quiet exit 0), before any stage is computed or tracked."""
    (tmp_path / f"{user_module}.py").write_text(MODELS["sys.exit in the factory"][0])
    workflow(tmp_path, MODEL_SPEC.replace("{module}", user_module))
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 3, run.output
    assert "model.python: calling" in run.output and "called sys.exit('no model today')" in run.output
    assert entries(tmp_path) == []


DATA = {
    "a SyntaxError": ("def load(:\n    pass\n", "running 'loader.py' failed: SyntaxError at {file}:1"),
    "sys.exit at import": ("import sys\nsys.exit(3)\n", "running 'loader.py' called sys.exit(3) at {file}:2 in <module>"),
    "sys.exit in the function": ("import sys\n\ndef load():\n    sys.exit()\n", "called sys.exit(None) at {file}:4 in load"),
    "an endless loop in the function": ("def load():\n    while True:\n        pass\n",
                                        "did not return within 1 s; it was stopped at {file}:"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(DATA))
def test_a_python_data_module_that_misbehaves_is_a_located_spec_error(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`data: python` code that does not import, exits or never returns: exit 3 at
    validate and run, naming the spec's key and the user's file and line."""
    monkeypatch.setenv("BAYESFLOW_USER_CODE_TIMEOUT", "1")
    source, expected = DATA[case]
    (tmp_path / "loader.py").write_text(source)
    write_table(tmp_path, good_rows(), spec=DATA_SPEC)
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output
    assert "spec.yaml:4:3: data.module: " in validated.output or "spec.yaml:5:3: data.function: " in validated.output
    assert expected.format(file=tmp_path / "loader.py") in validated.output
    assert "Traceback" not in validated.output
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 3 and last_error(run.output) == last_error(validated.output)
    assert entries(tmp_path) == []


# --------------------------------------------------------- 3. data files that are not text


def _png() -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4


CSV_FILES = {
    "random bytes": (lambda rows: bytes((index * 7919 + 13) % 256 for index in range(20_000)),
                     "table.csv is not text: it holds binary data (it starts "),
    "a gzip named .csv": (lambda rows: gzip.compress(rows),
                          ("table.csv is not text: it is a gzip-compressed file; expected a UTF-8 text file of "
                           "comma-separated values with a header row; name it table.csv.gz")),
    "a PNG renamed .csv": (lambda rows: _png(), "table.csv is not text: it is a PNG image"),
    "Latin-1 text": (lambda rows: rows.replace(b"a,b,y", b"\xe9t\xe9,b,y"),
                     "table.csv is not UTF-8 text (byte 0xe9 on line 1, at offset 0)"),
    "a 17 MiB header": (lambda rows: b"a" * (17 * 1024 * 1024) + b",y\n1,0\n",
                        "table.csv has a line over 16 MiB long (line 1)"),
    "a first row of a million fields": (lambda rows: b"a,b,y\n" + b"1," * 1_000_000 + b"1\n",
                                        "table.csv line 2 has 1000001 fields, the header 3 (a, b, y)"),
}


@pytest.mark.slow  # 2-4 s on the shared 2-core CPU: make test, not the fast lane
@pytest.mark.parametrize("case", sorted(CSV_FILES))
def test_a_csv_file_that_is_not_a_table_gets_a_short_message(case: str, tmp_path: Path) -> None:
    """validate and run refuse it with exit 3 in at most 500 characters, naming the file
    and what was expected."""
    make, expected = CSV_FILES[case]
    write_table(tmp_path, good_rows())
    good = (tmp_path / "table.csv").read_bytes()
    (tmp_path / "table.csv").write_bytes(make(good))
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output[:2000]
    assert f"spec.yaml:4:3: data.path: {expected}" in validated.output
    assert len(validated.output) <= 500 and "Traceback" not in validated.output
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 3 and last_error(run.output) == last_error(validated.output)


IMDB_SPEC = TABLE_SPEC.replace("  name: csv\n  path: table.csv\n  target: y", "  name: imdb\n  path: reviews\n  vocab_size: 50\n  max_length: 8").replace(
    "  name: mlp\n  hidden: [4]", "  name: cnn_lstm\n  vocabulary_size: 50\n  embedding_size: 4\n  filters: 4\n  hidden_size: 4"
)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"imdb_train.csv.gz": b"\x1f\x8b\x08\x00garbage" * 10, "imdb_test.csv.gz": b""},
         "imdb_train.csv.gz cannot be decompressed as its name (.gz) says"),
        ({"imdb_train.csv": _png(), "imdb_test.csv": b"text,label\n"}, "imdb_train.csv is not text: it is a PNG image"),
        ({"aclImdb/train/pos/1_9.txt": b"gr\xe9at", "aclImdb/train/neg/2_1.txt": b"bad"},
         "1_9.txt is not UTF-8 text (byte 0xe9 at offset 2)"),
    ],
    ids=["a gzip of garbage", "a PNG as csv", "a Latin-1 review"],
)
def test_imdb_files_that_are_not_text_get_a_short_message(files: dict[str, bytes], expected: str, tmp_path: Path) -> None:
    """The IMDB readers (csv, csv.gz, the aclImdb layout) refuse what is not UTF-8 text
    with exit 3 and a short message naming the file."""
    for name, content in files.items():
        (tmp_path / "reviews" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "reviews" / name).write_bytes(content)
    (tmp_path / "spec.yaml").write_text(IMDB_SPEC)
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output[:2000]
    assert expected in validated.output
    assert len(validated.output) <= 500 and "Traceback" not in validated.output


@pytest.mark.slow  # a real command line run (about 10 s): outside the fast lane
def test_a_forward_that_exits_fails_its_stage_not_the_run_quietly(user_module: str, tmp_path: Path) -> None:
    """A model whose forward calls sys.exit(0) during the fit: the stage fails, named, the
    run exits 1 (not 0 with nothing done) and its fit run is FAILED, not RUNNING."""
    from tests.chaos.helpers import fit_runs

    (tmp_path / f"{user_module}.py").write_text(
        "import sys\nimport torch\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self, features, outputs):\n        super().__init__()\n"
        "        self.linear = torch.nn.Linear(features, outputs)\n\n"
        "    def forward(self, inputs):\n        sys.exit(0)\n\n\n"
        "def make(num_features, num_outputs):\n    return Net(num_features, num_outputs)\n"
    )
    workflow(tmp_path, MODEL_SPEC.replace("{module}", user_module))
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 1, run.output
    assert f"the code it ran called sys.exit(0) at {tmp_path / (user_module + '.py')}:11 in forward" in run.output
    assert fit_runs(tmp_path) == {"fit/map/T=shared/seed=0": ["FAILED"]}


@pytest.mark.slow  # a real command line run (about 10 s): outside the fast lane
def test_an_endless_loop_is_stopped_in_the_real_command(tmp_path: Path) -> None:
    """Through the installed command (a process of its own, the watchdog's SIGALRM in its
    main thread): exit 3 within the limit, the user's line named, no traceback."""
    import os
    import subprocess

    (tmp_path / "looping_net.py").write_text("import time\n\nwhile True:\n    time.sleep(0.01)\n")
    write_table(tmp_path, good_rows(), spec=MODEL_SPEC.replace("{module}", "looping_net"))
    environment = {**os.environ, "BAYESFLOW_USER_CODE_TIMEOUT": "2", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run(
        [sys.executable, "-m", "bayesflow.cli", "validate", "spec.yaml"], cwd=tmp_path,
        capture_output=True, text=True, env=environment, timeout=300, check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "importing module 'looping_net' did not return within 2 s; it was stopped at " in done.stderr
    assert f"{tmp_path / 'looping_net.py'}:4 in <module>: `time.sleep(0.01)`" in done.stderr
    assert "Traceback" not in done.stderr


def test_spec_keys_that_do_not_print_are_escaped(tmp_path: Path) -> None:
    """A key holding a right-to-left override (which reorders what a terminal shows) or a
    control character is shown escaped in the message, never raw."""
    write_table(tmp_path, good_rows(), spec=TABLE_SPEC.replace("seeds: [0]", 'seeds: [0]\n"\\u202eseeds\\x07": [1]'))
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output
    assert "unknown key `\\u202eseeds\\x07`; did you mean `seeds`?" in validated.output
    assert "\u202e" not in validated.output and "\x07" not in validated.output


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("seeds=[99999999999999999999999]", "seeds: expected seeds that fit in 64 bits"),
        ("seeds=[0,true]", "seeds: expected numbers, got the boolean true"),
        ("temperatures=[on]", "temperatures: expected numbers, got the boolean true"),
        ('methods={"../x*": {engine: map}}', "methods: method name '../x*' is not a plain name"),
    ],
    ids=["a seed past 64 bits", "a boolean seed", "a boolean temperature", "a method name with / and *"],
)
def test_grid_values_a_run_cannot_name_or_seed_are_refused(override: str, expected: str, tmp_path: Path) -> None:
    """A seed torch cannot take (an internal error at the fit before), `true` read as 1
    and a method name that would break stage names and globs: exit 3 at validate."""
    write_table(tmp_path, good_rows())
    validated = invoke(tmp_path, "validate", "spec.yaml", override)
    assert validated.exit_code == 3, validated.output
    assert expected in validated.output and "Traceback" not in validated.output


def test_an_endless_loop_outside_the_main_thread_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no SIGALRM can be used (a stage run in a thread), the watchdog raises into
    the looping thread itself and names the line it was on."""
    import threading

    from bayesflow.errors import SpecError
    from bayesflow.user_code import run_user_code

    monkeypatch.setenv("BAYESFLOW_USER_CODE_TIMEOUT", "0.5")
    caught: list[BaseException] = []

    def loop() -> None:
        while True:
            pass

    def worker() -> None:
        try:
            run_user_code(loop, "model.python", "calling make()", [__file__])
        except SpecError as error:
            caught.append(error)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and len(caught) == 1
    assert "model.python: calling make() did not return within 0.5 s; it was stopped at " in str(caught[0])
    assert "in loop: `while True:`" in str(caught[0]) or "in loop: `pass`" in str(caught[0])
