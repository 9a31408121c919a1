"""Tests of report rendering: jupytext → papermill → nbconvert.

Each render starts a real Jupyter kernel (a few seconds), so the suite keeps to three.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from bayesflow.errors import RegistryError, StageError
from bayesflow.report import KERNEL_NAME, bundle, find_template, list_templates, render_report
from bayesflow.report.render import _private_kernel

from .conftest import synthetic_results

TINY_TEMPLATE = """\
# %% [markdown]
# # Tiny report

# %% tags=["parameters"]
greeting = "hello"

# %%
# %matplotlib inline
import sys

import matplotlib.pyplot as plt

print("kernel executable:", sys.executable)
print("greeting:", greeting)
plt.plot([0, 1], [1, 0])
plt.show()
"""

FAILING_TEMPLATE = """\
# %% tags=["parameters"]
metric = "test_nll"

# %%
raise KeyError(f"no column {metric}")
"""


def _error_outputs(notebook_path: Path) -> list[dict]:
    notebook = nbformat.read(notebook_path, as_version=4)
    return [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def _stream_text(notebook_path: Path) -> str:
    notebook = nbformat.read(notebook_path, as_version=4)
    return "".join(
        output.get("text", "")
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )


def test_list_templates_includes_the_default() -> None:
    """The shipped cold_posterior template is listed."""
    assert "cold_posterior" in list_templates()


def test_missing_template_lists_the_existing_ones() -> None:
    """An unknown template name raises an error naming the templates that exist."""
    with pytest.raises(RegistryError, match=r"'no_such_report' not found.*cold_posterior"):
        find_template("no_such_report")


def test_private_kernel_runs_our_interpreter() -> None:
    """The private kernelspec runs sys.executable and JUPYTER_PATH is restored after."""
    before = os.environ.get("JUPYTER_PATH")
    with _private_kernel(Path(os.environ.get("TMPDIR", "/tmp")) / f"bf-{os.getpid()}"):
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    assert spec.argv[:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert os.environ.get("JUPYTER_PATH") == before


@pytest.mark.slow
def test_tiny_template_renders_self_contained_html(tmp_path: Path) -> None:
    """A tiny template renders with our interpreter, parameters and an embedded PNG."""
    template = tmp_path / "tiny.py"
    template.write_text(TINY_TEMPLATE)
    output_dir = tmp_path / "out"

    report = render_report(template, {"greeting": "bonjour"}, output_dir, name="tiny")

    assert report.notebook == output_dir / "tiny.ipynb"
    assert sorted(path.name for path in output_dir.iterdir()) == ["tiny.html", "tiny.ipynb"]
    assert not _error_outputs(report.notebook)
    printed = _stream_text(report.notebook)
    assert f"kernel executable: {sys.executable}\n" in printed
    assert "greeting: bonjour" in printed
    html = report.html.read_text()
    assert 'src="data:image/png;base64,' in html
    assert not re.search(r'<img[^>]+src="(?!data:)', html)
    assert "plt.plot" not in html  # code input hidden by default


@pytest.mark.slow
def test_cold_posterior_template_renders(tmp_path: Path) -> None:
    """The default template renders every requested figure, the results table and the
    failed cell with its error, from a bundle."""
    folder = bundle.write(tmp_path / "bundle", synthetic_results().drop(columns="run_id"))
    plots = ["nll_vs_temperature", "accuracy_vs_temperature", "ece_vs_temperature"]
    parameters = {
        "bundle": folder,
        "workflow": "cold_posterior",
        "spec_yaml": "name: cold_posterior\ntemperatures: [0.1, 1.0, 3.0]\n",
        "plots": plots,
        "tracking_uri": "sqlite:///mlflow.db",
    }

    report = render_report("cold_posterior", parameters, tmp_path / "out")

    assert not _error_outputs(report.notebook)
    html = report.html.read_text()
    assert html.count('src="data:image/png;base64,') == len(plots)
    assert "<table" in html and "0.305 ± 0.007" in html
    text = re.sub(r"<[^>]+>", "", html)  # the spec is syntax-highlighted into spans
    assert "temperatures: [0.1, 1.0, 3.0]" in text
    assert "fit/sghmc/T=3/seed=1" in text and "diverged" in text and "bayesflow ui" in text


@pytest.mark.slow
def test_failing_cell_raises_stage_error(tmp_path: Path) -> None:
    """A cell that raises gives a StageError naming the error and keeping the notebook."""
    template = tmp_path / "failing.py"
    template.write_text(FAILING_TEMPLATE)

    with pytest.raises(StageError, match=r"raised KeyError: 'no column test_nll'") as caught:
        render_report(template, {}, tmp_path / "out", name="failing")

    error = caught.value
    assert error.error_name == "KeyError"
    assert error.notebook == tmp_path / "out" / "failing.failed.ipynb"
    assert error.notebook.exists() and _error_outputs(error.notebook)
    assert str(error.notebook) in str(error)
    assert not (tmp_path / "out" / "failing.html").exists()
