"""`bayesflow validate` runs the data checks that `bayesflow run` runs before any fit:
the same message, exit code 3, for data a spec cannot show on its face."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.helpers import entries, invoke
from tests.data.tables import good_rows, write_table

ROWS = good_rows()
BAD_DATA = {
    "labels -1 and 1 under bernoulli": (
        [(a, b, 2 * y - 1) for a, b, y in ROWS],
        "data.target: `bernoulli` needs labels 0 and 1, but the target column 'y' of table.csv holds -1",
    ),
    "a NaN feature": (
        [("nan" if index == 3 else a, b, y) for index, (a, b, y) in enumerate(ROWS)],
        "data.path: column 'a' of table.csv has 1 NaN (empty or nan) value (row 4)",
    ),
    "an infinite feature": (
        [(a, "inf" if index == 0 else b, y) for index, (a, b, y) in enumerate(ROWS)],
        "data.path: column 'b' of table.csv has 1 infinite value (row 1)",
    ),
    "one row": (ROWS[:1], "table.csv has 1 data row; a train/test split needs at least two"),
}


def last_error(output: str) -> str:
    """What a command printed from its ``error:`` on."""
    return output[output.index("error:"):]


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_validate_refuses_what_run_refuses_with_the_same_message(case: str, tmp_path: Path) -> None:
    rows, message = BAD_DATA[case]
    write_table(tmp_path, rows)
    validated = invoke(tmp_path, "validate", "spec.yaml")
    assert validated.exit_code == 3, validated.output
    assert message in validated.output and "Traceback" not in validated.output
    run = invoke(tmp_path, "run", "spec.yaml")
    assert run.exit_code == 3
    assert last_error(validated.output) == last_error(run.output)
    assert entries(tmp_path) == [] and not (tmp_path / "mlflow.db").exists()  # nothing computed or tracked


def test_validate_passes_good_data(tmp_path: Path) -> None:
    write_table(tmp_path, good_rows())
    result = invoke(tmp_path, "validate", "spec.yaml")
    assert result.exit_code == 0, result.output
    assert result.output == "spec.yaml: valid (1 method, 1 temperature, 1 seed)\n"


def test_a_constant_column_is_a_warning_at_validate_too(tmp_path: Path) -> None:
    write_table(tmp_path, [(1.0, b, y) for _, b, y in good_rows()])
    with pytest.warns(UserWarning, match="column 'a' of table.csv is constant in the training rows"):
        result = invoke(tmp_path, "validate", "spec.yaml")
    assert result.exit_code == 0, result.output
