"""Render a report template into an executed notebook and one self-contained HTML file.

A template is a jupytext "percent" ``.py`` file (reviewable as text, diffable in a pull
request) whose parameters cell is tagged ``parameters``::

    # %% tags=["parameters"]
    run_id = ""

Rendering is three steps: jupytext turns the text into a notebook, papermill injects
the parameters and executes it, and nbconvert's ``HTMLExporter`` turns the executed
notebook into one HTML file whose figures are embedded as ``data:image/png;base64``
URIs. Both files are written atomically (a temporary name, then ``os.replace``), so a
reader never sees half a report.

Where templates are found (:func:`find_template`), in order:

1. a path given directly (``templates/my_report.py`` or ``/abs/path/report.py``): the
   notebook is the user's code and runs as such, like a ``python:`` model;
2. ``./templates/<name>.py`` under the current working directory (a user's own
   templates, next to their workflows);
3. the templates that ship with bayesflow: the top-level ``templates/`` of a checkout,
   carried inside an installed wheel as ``bayesflow/templates/`` (:mod:`bayesflow.shipped`
   finds either), so that an installed wheel renders reports as a checkout does. From a
   clone's root, 2 and 3 are the same folder.

The kernel runs the same interpreter as bayesflow (``sys.executable``): a kernelspec
for it is written into a private temporary folder that is put first on
``JUPYTER_PATH`` while the notebook runs, so a system-wide ``python3`` kernelspec that
points at another interpreter (without bayesflow) is never picked
(:mod:`bayesflow.report.kernel`). A kernel prestarted there while the fits ran
(:func:`~bayesflow.report.kernel.prestart`) is used when it is ready, and shut down
after the notebook ran; otherwise papermill starts one.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayesflow.errors import RegistryError, StageError
from bayesflow.report import kernel
from bayesflow.report.kernel import KERNEL_NAME
from bayesflow.report.kernel import display_name as _display_name
from bayesflow.report.kernel import private_kernelspec as _private_kernel

__all__ = [
    "KERNEL_NAME",
    "RenderedReport",
    "ReportError",
    "find_template",
    "list_templates",
    "render_report",
    "source_digest",
    "template_folders",
    "unwritable_output",
]

TEMPLATE_SUFFIX = ".py"


class ReportError(StageError):
    """A report notebook failed to execute.

    Attributes:
        notebook: the partially executed notebook, kept for reading the traceback.
        error_name: the exception class raised in the cell, e.g. ``"KeyError"``.
        error_value: the exception's message.
    """

    def __init__(
        self,
        message: str,
        *,
        notebook: Path | None = None,
        error_name: str | None = None,
        error_value: str | None = None,
    ) -> None:
        super().__init__(message)
        self.notebook = notebook
        self.error_name = error_name
        self.error_value = error_value


@dataclass(frozen=True)
class RenderedReport:
    """The files of one rendered report.

    Attributes:
        notebook: the executed notebook (``<name>.ipynb``).
        html: the self-contained HTML file (``<name>.html``).
        execute_seconds: wall time of the papermill execution (kernel start included).
        convert_seconds: wall time of the nbconvert HTML export.
    """

    notebook: Path
    html: Path
    execute_seconds: float = 0.0
    convert_seconds: float = 0.0


def template_folders() -> list[Path]:
    """Return the folders searched for templates by name, in search order."""
    from bayesflow.shipped import shipped_folder

    shipped = shipped_folder("templates")
    folders = [Path.cwd() / "templates", shipped]
    unique: list[Path] = []
    for folder in folders:
        if folder.resolve() not in {seen.resolve() for seen in unique}:
            unique.append(folder)
    return unique


def list_templates() -> list[str]:
    """Return the names of the templates found in :func:`template_folders`, sorted."""
    names = {
        path.stem
        for folder in template_folders()
        if folder.is_dir()
        for path in folder.glob(f"*{TEMPLATE_SUFFIX}")
        if not path.name.startswith(("_", "."))
    }
    return sorted(names)


def find_template(template: str | Path) -> Path:
    """Resolve a template given as a path or as a name.

    Args:
        template: a path to a ``.py`` template, or a name such as ``"cold_posterior"``.

    Returns:
        The path of the template file.

    Raises:
        RegistryError: no template of that name or path exists; the message lists the
            templates that do.
    """
    direct = Path(template).expanduser()
    if direct.is_file():
        return direct
    name = direct.name.removesuffix(TEMPLATE_SUFFIX)
    folders = template_folders()
    for folder in folders:
        candidate = folder / f"{name}{TEMPLATE_SUFFIX}"
        if candidate.is_file():
            return candidate
    available = ", ".join(list_templates()) or "none"
    searched = ", ".join(str(folder) for folder in folders)
    raise RegistryError(
        f"report template {str(template)!r} not found; expected a path to a jupytext "
        f"percent .py file or one of the templates [{available}] (searched {searched})"
    )


def source_digest(template: str | Path | None = None) -> str:
    """A hash of what figures and reports are drawn with, for the keys of plot and report
    stages: the sources of :mod:`bayesflow.report`, of the plot, report and results-table
    stage modules, and, given a template, the template
    file's content (found as :func:`render_report` finds it).

    Raises:
        RegistryError: the template does not exist.
    """
    digest = hashlib.sha256()
    package = Path(__file__).parents[1]
    # The figure and report code, and the stage modules that gather what they draw.
    sources = sorted(Path(__file__).parent.glob("*.py")) + [
        package / "stages" / f"{name}.py" for name in ("plot", "report", "table")
    ]
    if template is not None:
        sources.append(find_template(template))
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def unwritable_output(error: OSError, folder: Path, kept: str) -> ReportError:
    """A :class:`ReportError` saying why the report's files could not be written into
    ``folder`` (a full or read-only disk, no permission) and what to do; ``kept`` says
    where the finished work is meanwhile."""
    from shlex import quote

    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"Free some space there (`df -h {quote(str(folder))}` shows it)"
    elif error.errno == errno.EROFS:
        fix = "Remount it read-write"
    else:
        fix = "Make it writable"
    return ReportError(
        f"cannot write the report into {folder} ({error.strerror or error}); {kept}. {fix} and "
        "run the same command again, or write reports elsewhere: `report.output_dir=<folder>` "
        "(`bayesflow run SPEC report.output_dir=<folder>`, `bayesflow report RUN_ID --output-dir <folder>`)"
    )


def render_report(
    template: str | Path,
    parameters: Mapping[str, Any],
    output_dir: Path,
    *,
    name: str = "report",
    timeout: int = 600,
    show_code: bool = False,
) -> RenderedReport:
    """Execute a report template with parameters and export it to HTML.

    Args:
        template: a template name (see :func:`list_templates`) or a path to one.
        parameters: values injected after the template's ``parameters`` cell; a
            ``Path`` is passed as its string.
        output_dir: folder that receives ``<name>.ipynb`` and ``<name>.html``; created
            if missing.
        name: stem of the two output files.
        timeout: seconds one cell may run before the render fails.
        show_code: keep the code cells' input in the HTML (hidden by default, so the
            report reads as a document).

    Returns:
        The paths of the executed notebook and of the HTML file, with timings.

    Raises:
        RegistryError: the template does not exist.
        ReportError: (a :class:`~bayesflow.errors.StageError`) a cell raised, timed
            out, or the kernel died. The partially executed notebook is kept as
            ``<name>.failed.ipynb`` and named in the message and in the error's
            ``notebook`` attribute.
    """
    template_path = find_template(template)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    notebook_path = output_dir / f"{name}.ipynb"
    html_path = output_dir / f"{name}.html"
    failed_path = output_dir / f"{name}.failed.ipynb"
    # papermill writes here (at the end, or with a failing cell); the temporary name keeps
    # a previous report whole.
    partial_path = output_dir / f".{name}.{uuid.uuid4().hex}.ipynb"

    from bayesflow.report.offline import prepare_export

    exporting = prepare_export()  # while the kernel runs the notebook
    try:
        started = time.perf_counter()
        try:
            notebook = _execute(template_path, parameters, partial_path, failed_path, timeout)
        except ReportError as error:
            if partial_path.exists():
                os.replace(partial_path, failed_path)
            error.notebook = failed_path if failed_path.exists() else None
            raise
        execute_seconds = time.perf_counter() - started

        started = time.perf_counter()
        exporting.join()
        html = _export_html(notebook, title=name, show_code=show_code)
        convert_seconds = time.perf_counter() - started

        partial_html = output_dir / f".{name}.{uuid.uuid4().hex}.html"
        partial_html.write_text(html, encoding="utf-8")
        os.replace(partial_path, notebook_path)
        os.replace(partial_html, html_path)
    finally:
        partial_path.unlink(missing_ok=True)
    failed_path.unlink(missing_ok=True)
    return RenderedReport(notebook_path, html_path, execute_seconds, convert_seconds)


def _execute(
    template_path: Path,
    parameters: Mapping[str, Any],
    output_path: Path,
    failed_path: Path,
    timeout: int,
) -> Any:
    """Convert the template with jupytext and execute it with papermill.

    ``failed_path`` is where the caller keeps the partial notebook on failure; the
    messages name it.
    """
    import jupytext
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = jupytext.read(template_path)
    notebook.metadata["kernelspec"] = {
        "name": KERNEL_NAME,
        "display_name": _display_name(),
        "language": "python",
    }
    values = {
        key: str(value) if isinstance(value, Path) else value for key, value in parameters.items()
    }
    with tempfile.TemporaryDirectory(prefix="bayesflow-report-") as scratch:
        input_path = Path(scratch) / f"{template_path.stem}.ipynb"
        jupytext.write(notebook, input_path, fmt="ipynb")
        # Taken before the kernelspec: a kernel still starting needs JUPYTER_PATH's lock.
        with kernel.taken() as manager, _private_kernel(Path(scratch)):

            def execute(given: Any) -> Any:
                return papermill.execute_notebook(
                    input_path,
                    output_path,
                    parameters=values,
                    kernel_name=KERNEL_NAME,
                    language="python",
                    progress_bar=False,
                    execution_timeout=timeout,
                    # No save after every cell (~0.35 s of the default report, measured):
                    # a cell's error still writes the notebook with it before raising.
                    request_save_on_cell_execute=False,
                    # nbclient runs the notebook in a given kernel and leaves it running.
                    **({} if given is None else {"km": given}),
                )

            try:
                try:
                    return execute(manager)
                except RuntimeError as exc:
                    if not kernel.died_before_use(manager, exc):
                        raise
                    return execute(None)  # the prestarted kernel died: start one as usual
            except papermill.PapermillExecutionError as exc:
                raise _cell_error(template_path, failed_path, exc) from exc
            except CellTimeoutError as exc:
                raise ReportError(
                    f"report template {template_path}: a cell ran longer than {timeout} s; "
                    f"partially executed notebook: {failed_path}. Pass a larger `timeout` "
                    "or make the cell faster."
                ) from exc
            except DeadKernelError as exc:
                raise ReportError(
                    f"report template {template_path}: the kernel died ({exc}); partially "
                    f"executed notebook: {failed_path}. It often means the notebook ran "
                    "out of memory."
                ) from exc
            except RuntimeError as exc:
                # jupyter_client raises RuntimeError when the kernel does not start.
                raise ReportError(
                    f"report template {template_path}: the Jupyter kernel "
                    f"({sys.executable} -m ipykernel_launcher) did not start: {exc}. "
                    "Check that ipykernel is installed in this environment: "
                    f"{sys.executable} -m pip install ipykernel"
                ) from exc


def _cell_error(template_path: Path, failed_path: Path, exc: Any) -> ReportError:
    """Build the error of a cell that raised, naming the exception and the notebook."""
    return ReportError(
        f"report template {template_path}: cell {exc.cell_index} (In [{exc.exec_count}]) "
        f"raised {exc.ename}: {exc.evalue}\n"
        f"  partially executed notebook: {failed_path}\n"
        "  fix: open that notebook to read the traceback; check the parameters passed "
        "and the results the run logged (bayesflow ui).",
        error_name=exc.ename,
        error_value=exc.evalue,
    )


def _export_html(notebook: Any, *, title: str, show_code: bool) -> str:
    """Export an executed notebook to one HTML string with images as data URIs and
    formulas as MathML, loading nothing from the network (:mod:`bayesflow.report.offline`)."""
    from bayesflow.report.offline import Formulas, html_exporter, with_mathml, with_page_style

    exporter = html_exporter(show_code=show_code)
    formulas = Formulas()  # MathML kept out of the Markdown renderer, which breaks it up
    body, resources = exporter.from_notebook_node(
        with_mathml(notebook, formulas), resources={"metadata": {"name": title}}
    )
    if resources.get("outputs"):
        # An extracting preprocessor would leave image files next to the HTML.
        raise ReportError(
            f"HTML export produced external files {sorted(resources['outputs'])}; "
            "expected every image embedded in the HTML."
        )
    return with_page_style(formulas.restore(body))
