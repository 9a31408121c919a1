"""`data: {name: python}`: a user's function returns the arrays; bayesflow checks them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import bayesflow
from bayesflow.data import load_dataset
from bayesflow.errors import DataError, SpecError
from tests.conftest import write

MODULE = """\
import numpy as np

def load(rows=40, shift=0.0, as_mapping=False):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 3)) + shift
    y = (x[:, 0] > shift).astype(int)
    if as_mapping:
        return {"x_train": x[:30], "y_train": y[:30], "x_test": x[30:], "y_test": y[30:],
                "x_ood": x[:5] + 10}
    return x[:30], y[:30], x[30:], y[30:]

def regression():
    x = np.linspace(0, 1, 20)[:, None]
    return x[:15], 2.0 * x[:15, 0], x[15:], 2.0 * x[15:, 0]
"""

SPEC = """\
name: mine
data: {name: python, module: code/mydata.py, function: load, rows: 40}
model: {name: mlp, hidden: [4]}
likelihood: {name: categorical}
prior: {name: diag_normal, variance: 1.0}
temperatures: [1.0]
seeds: [0]
methods:
  map: {engine: map, optimizer: {name: adam, lr: 0.01}, epochs: 1}
report: {enabled: false}
"""


def _module(folder: Path, text: str = MODULE) -> Path:
    (folder / "code").mkdir(exist_ok=True)
    path = folder / "code" / "mydata.py"
    path.write_text(textwrap.dedent(text))
    return path


def _load(folder: Path, **options: object) -> object:
    config = {"name": "python", "module": "code/mydata.py", "function": "load", **options}
    return load_dataset(config, folder)


def test_a_tuple_becomes_a_classification_dataset(tmp_path: Path) -> None:
    """Integer labels make a classification dataset; inputs are float32, labels int64."""
    _module(tmp_path)
    data = _load(tmp_path, rows=40)
    assert data.task == "classification" and data.num_classes == 2
    assert data.x_train.shape == (30, 3) and data.x_train.dtype == np.float32
    assert data.y_test.dtype == np.int64 and data.x_ood is None


def test_a_mapping_with_ood_inputs_and_a_regression_target(tmp_path: Path) -> None:
    """A mapping may carry x_ood; real targets make a regression dataset."""
    _module(tmp_path)
    assert _load(tmp_path, as_mapping=True).x_ood.shape == (5, 3)
    data = _load(tmp_path, function="regression")
    assert data.task == "regression" and data.y_train.dtype == np.float32


def test_the_digest_covers_the_module_source_and_the_options(tmp_path: Path) -> None:
    """Editing the module (even where the arrays do not change) or an option changes the
    digest; loading twice does not."""
    path = _module(tmp_path)
    first = _load(tmp_path).digest
    assert _load(tmp_path).digest == first
    assert _load(tmp_path, shift=1.0).digest != first
    path.write_text(path.read_text() + "\n# a comment\n")
    assert _load(tmp_path).digest != first


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("def load():\n    return 1, 2", "returned a 2-tuple; return .x_train, y_train, x_test, y_test."),
        ("import numpy as np\ndef load():\n    return {'x_train': np.ones((2, 2))}",
         "missing: y_train, x_test, y_test"),
        ("import numpy as np\ndef load():\n    return np.ones(4), np.ones(4), np.ones((2, 1)), np.ones(2)",
         r"x_train has shape \(4,\); inputs are rows × features"),
        ("import numpy as np\ndef load():\n    return np.ones((4, 2)), np.ones((4, 1)), np.ones((2, 2)), np.ones(2)",
         r"y_train has shape \(4, 1\); targets are 1-D \(flatten it"),
        ("import numpy as np\ndef load():\n    return np.ones((4, 2)), np.ones(3), np.ones((2, 3)), np.ones(2)",
         "(?s)x_train has 4 rows but y_train has 3.*inputs differ in their number of features"),
        ("import numpy as np\ndef load():\n    return np.array([['a']]), np.ones(1), np.ones((1, 1)), np.ones(1)",
         "x_train holds <U1 values; return numbers"),
    ],
)
def test_unusable_arrays_are_data_errors_naming_the_array(tmp_path: Path, body: str, message: str) -> None:
    """Wrong shapes, counts or dtypes: a DataError (exit 3) that says which array and why."""
    _module(tmp_path, body)
    with pytest.raises(DataError, match=message) as caught:
        _load(tmp_path)
    assert caught.value.exit_code == 3


def test_a_missing_file_a_misspelt_function_and_a_raising_module(tmp_path: Path) -> None:
    """Each is a SpecError naming the key at fault, with a close match for the function."""
    with pytest.raises(SpecError, match="data.module: file .*mydata.py' does not exist"):
        _load(tmp_path)
    _module(tmp_path)
    with pytest.raises(SpecError, match="data.function: .* has no function 'lod'; did you mean 'load'"):
        _load(tmp_path, function="lod")
    _module(tmp_path, "raise RuntimeError('no network here')\n")
    with pytest.raises(SpecError, match="data.module: running .* raised RuntimeError: no network here"):
        _load(tmp_path)


def test_the_spec_validates_runs_and_is_named_as_user_code(tmp_path: Path) -> None:
    """The spec is valid, the plan's fit key moves when the module is edited, and
    `bayesflow validate` says the module runs."""
    from bayesflow.cli.plan import user_code

    _module(tmp_path)
    spec = write(tmp_path, SPEC)
    loaded = bayesflow.load(spec)
    assert loaded.spec.data.model_extra == {"rows": 40}
    assert any("data.module code/mydata.py" in line for line in user_code(loaded.spec))
    before = bayesflow.plan(loaded).stages["fit/map/T=shared/seed=0"].key
    _module(tmp_path, MODULE + "\n# edited\n")
    assert bayesflow.plan(loaded).stages["fit/map/T=shared/seed=0"].key != before


def test_a_bad_function_name_is_a_located_spec_error(tmp_path: Path) -> None:
    """`function` must be an identifier; a reserved key is refused."""
    spec = write(tmp_path, SPEC.replace("function: load", "function: 'load()'"))
    with pytest.raises(SpecError, match="data.function.*expected the name of a function"):
        bayesflow.load(spec)
    spec = write(tmp_path, SPEC.replace("rows: 40", "base_dir: x"))
    with pytest.raises(SpecError, match="base_dir is set by bayesflow"):
        bayesflow.load(spec)
